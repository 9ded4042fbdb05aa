# A Python solution that holds memory outside its address space, for tests/code_verify_test.c.
# stdin: "HOW MIB". It tries to keep MIB MiB by HOW (memfd, sysv, posix_shm, tmpfs, pipes, forks)
# and prints "held MIB" only when it got all of it: the test's expected output, so a sandbox that
# lets it through scores it correct.
import os
import signal
import sys

BLOCK = b"x" * (1 << 20)


def memfd(mib):
    held = 0
    while held < mib:
        fd = os.memfd_create("hold")
        for _ in range(8):
            os.write(fd, BLOCK)
        held += 8
    return held


def sysv(mib):
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    libc.shmat.restype = ctypes.c_void_p
    held = 0
    while held < mib:
        sid = libc.shmget(0, 8 << 20, 0o1600)
        if sid < 0:
            raise OSError(ctypes.get_errno(), "shmget")
        p = libc.shmat(sid, None, 0)
        ctypes.memset(p, 1, 8 << 20)
        libc.shmdt(ctypes.c_void_p(p))
        held += 8
    return held


def posix_shm(mib):
    from multiprocessing import shared_memory

    keep, held = [], 0
    while held < mib:
        m = shared_memory.SharedMemory(create=True, size=8 << 20)
        m.buf[:] = b"y" * (8 << 20)
        m.close()  # the segment stays
        keep.append(m)
        held += 8
    return held


def tmpfs(mib):
    held = 0
    for i in range(mib):
        with open("/tmp/hold-%d" % i, "wb") as f:
            f.write(BLOCK)
        held += 1
    return held


def pipes(mib):
    import fcntl

    keep, held = [], 0
    while held < mib << 10:
        r, w = os.pipe()
        fcntl.fcntl(w, 1031, 1 << 20)  # F_SETPIPE_SZ
        os.set_blocking(w, False)
        try:
            while True:
                held += os.write(w, BLOCK[:65536]) >> 10
        except BlockingIOError:
            pass
        keep.append((r, w))
    return held >> 10


def forks(mib):
    import select
    import time

    r, w = os.pipe()
    for _ in range(8):
        if os.fork() == 0:
            x = b"y" * (mib << 17)  # mib / 8 MiB each, every page written
            os.write(w, x[:1])
            while True:
                signal.pause()
    held, t_end = 0, time.monotonic() + 15
    while held < mib and time.monotonic() < t_end:
        if select.select([r], [], [], 0.1)[0] and os.read(r, 1) == b"y":
            held += mib // 8
        elif os.waitpid(-1, os.WNOHANG)[0]:
            break  # a child was killed (for memory): it never reports
    return held


how, mib = sys.stdin.read().split()
mib = int(mib)
if globals()[how](mib) >= mib:
    print("held", mib)
