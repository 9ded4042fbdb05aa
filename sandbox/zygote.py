# The pre-warmed Python zygote (sandbox/pool.c starts it inside a sandbox, as PID 1 of its PID
# namespace, under the sandbox's seccomp filter, which its children inherit). fd 3 is the control
# socket. It reads the preload source once, then for each call forks one child, which lowers its
# rlimits, finds stdin on fd 0 and pipes on fds 1/2 (placed by the zygote before the fork, so
# the child's sys.stdin/stdout objects need no rebuilding) and runs preload's fn(args). One call
# runs at a time, so every other process in the namespace belongs to that call: the zygote ends
# a call with kill(-1, SIGKILL), which as the namespace's init reaches all of them and not itself.
# It drains the pipes with caps, enforces the wall deadline, reaps everything, wipes /tmp and
# reports the raw wait status and usage; sandbox/pool.c classifies it like any other run.
# Frames: request  = u32 hlen, u32 blen, header JSON, body (stdin bytes)
#         response = u32 hlen, u32 olen, u32 elen, header JSON, stdout, stderr
import gc, io, json, os, resource, select, signal, struct, sys, time, traceback

CTL = 3


def _read_exact(n):
    b = bytearray()
    while len(b) < n:
        k = os.read(CTL, n - len(b))
        if not k:
            os._exit(0)
        b += k
    return bytes(b)


def _send(hdr, out=b"", err=b""):
    h = json.dumps(hdr).encode()
    data = struct.pack("<III", len(h), len(out), len(err)) + h + out + err
    view = memoryview(data)
    while view:
        k = os.write(CTL, view)
        view = view[k:]




_NULL = os.open("/dev/null", os.O_RDWR)


def _wipe_tmp():
    def rm(path):
        try:
            st = os.lstat(path)
        except OSError:
            return
        if (st.st_mode & 0o170000) == 0o040000:
            try:
                os.chmod(path, 0o700)
            except OSError:
                pass
            try:
                for name in os.listdir(path):
                    rm(os.path.join(path, name))
            except OSError:
                pass
            try:
                os.rmdir(path)
            except OSError:
                pass
        else:
            try:
                os.unlink(path)
            except OSError:
                pass

    try:
        for name in os.listdir("/tmp"):
            rm(os.path.join("/tmp", name))
    except OSError:
        pass


def _child(fn, args, lim, res_w, nonce):
    me = os.getpid()
    try:
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        cpu = lim.get("cpu_ms", 0)
        if cpu:
            s = (cpu + 999) // 1000
            resource.setrlimit(resource.RLIMIT_CPU, (s, s + 1))
        for r, key in ((resource.RLIMIT_FSIZE, "fsize"), (resource.RLIMIT_NOFILE, "nofile"),
                       (resource.RLIMIT_NPROC, "nproc"), (resource.RLIMIT_AS, "mem")):
            v = lim.get(key, 0)
            if v:
                resource.setrlimit(r, (v, v))
        os.closerange(3, res_w)
        os.closerange(res_w + 1, 1 << 20)
    except BaseException:
        os._exit(125)
    code, msg = 0, None
    try:
        r = fn(args)
        if r is not None:
            msg = b"R" + json.dumps(r, allow_nan=False).encode()
    except SystemExit as e:
        c = e.code
        code = c if isinstance(c, int) else (0 if c is None else 1)
        if not isinstance(c, int) and c is not None:
            try:
                print(c, file=sys.stderr)
            except BaseException:
                pass
    except MemoryError:
        msg, code = b"M", 1
    except BaseException:
        try:
            traceback.print_exc()
        except BaseException:
            pass
        code = 1
    try:
        sys.stdout.flush()
    except BaseException:
        pass
    if msg is not None and os.getpid() == me:  # not from a process the program forked
        try:
            os.write(res_w, nonce + msg)
        except BaseException:
            pass
    os._exit(code & 0xFF)


def _kill_rest():
    try:
        os.kill(-1, signal.SIGKILL)
    except OSError:
        pass


def _kill_all():
    # as PID 1 of the namespace, kill(-1) reaches every other process in it, never us
    for _ in range(1000):
        try:
            os.kill(-1, signal.SIGKILL)
        except OSError:
            pass
        if not _reap_orphans():
            return
        time.sleep(0.0005)


def _reap_orphans():
    # True while some process is left (a zombie reaped now or one still dying)
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return False
        if pid == 0:
            return True


def _feed(fd, view, done):
    # writes what the stdin pipe takes now; closes it when all is written or the child is gone
    if fd < 0:
        return fd, view
    try:
        while view and not done:
            view = view[os.write(fd, view):]
    except BlockingIOError:
        return fd, view
    except OSError:
        pass
    os.close(fd)
    return -1, view


def _call(hdr, body, ns):
    lim = hdr.get("limits", {})
    fn = ns.get(hdr.get("fn", ""))
    if not callable(fn):
        _send({"error": "no function %r in the preload" % hdr.get("fn")})
        return
    # stdin is a pipe the loop below feeds (memfd_create is refused to sandboxed code, us too)
    stdin_fd, in_w = os.pipe()
    os.set_blocking(in_w, False)
    in_view = memoryview(body)
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    res_r, res_w = os.pipe()
    nonce = os.urandom(16).hex().encode()
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except BaseException:
        pass
    os.dup2(stdin_fd, 0)
    os.dup2(out_w, 1)
    os.dup2(err_w, 2)
    t0 = time.monotonic()
    pid = os.fork()
    if pid == 0:
        _child(fn, hdr.get("args"), lim, res_w, nonce)
    for fd in (0, 1, 2):
        os.dup2(_NULL, fd)
    for fd in (stdin_fd, out_w, err_w, res_w):
        os.close(fd)
    pidfd = os.pidfd_open(pid)
    caps = {out_r: lim.get("out_max", 1 << 20), err_r: lim.get("err_max", 65536), res_r: 1 << 24}
    keep = {out_r: bytearray(), err_r: bytearray(), res_r: bytearray()}
    total = {out_r: 0, err_r: 0, res_r: 0}
    open_ = {out_r, err_r, res_r}
    deadline = t0 + lim.get("wall_ms", 10000) / 1000.0
    out_kill = lim.get("out_kill", 64 << 20)
    timed_out = output_killed = exited = False
    status, ru = 0, None
    while open_ or not exited:
        left = deadline - time.monotonic()
        if left <= 0 and not timed_out and not exited:
            _kill_rest()  # reaping waits for the child's pidfd (wait4 below)
            timed_out = True
        in_w, in_view = _feed(in_w, in_view, exited)
        watch = list(open_) + ([] if exited else [pidfd])
        r, _, _ = select.select(watch, [] if in_w < 0 else [in_w], [],
                                0.05 if timed_out else max(left, 0) + 0.001)
        for fd in r:
            if fd == pidfd:
                exited = True
                _, status, ru = os.wait4(pid, 0)
                # the child is gone: whatever it left behind goes too
                _kill_all()
                continue
            try:
                chunk = os.read(fd, 65536)
            except OSError:
                chunk = b""
            if not chunk:
                open_.discard(fd)
                continue
            total[fd] += len(chunk)
            room = caps[fd] - len(keep[fd])
            if room > 0:
                keep[fd] += chunk[:room]
        if not output_killed and total[out_r] + total[err_r] > out_kill:
            _kill_rest()
            output_killed = True
    wall = (time.monotonic() - t0) * 1000.0
    _feed(in_w, in_view, True)
    _kill_all()
    for fd in (out_r, err_r, res_r, pidfd):
        os.close(fd)
    _wipe_tmp()
    res = bytes(keep[res_r])
    ret, mem = None, False
    if res.startswith(nonce):
        tag, payload = res[len(nonce):len(nonce) + 1], res[len(nonce) + 1:]
        if tag == b"M":
            mem = True
        elif tag == b"R":
            try:
                ret = json.loads(payload)
            except ValueError:
                ret = None
    _send({"wstatus": status, "timed_out": timed_out,
           "output_over": output_killed or total[out_r] > caps[out_r], "memory": mem,
           "cpu_ms": (ru.ru_utime + ru.ru_stime) * 1000.0, "wall_ms": wall,
           "rss_kb": ru.ru_maxrss, "out_total": total[out_r], "err_total": total[err_r],
           "has_ret": ret is not None, "ret": ret},
          bytes(keep[out_r]), bytes(keep[err_r]))


def main():
    # As PID 1 we only receive signals we handle; Python handles SIGINT, so a child could raise
    # KeyboardInterrupt in us with kill(1, SIGINT). Back to the default: ignored for init.
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    hlen, blen = struct.unpack("<II", _read_exact(8))
    _read_exact(hlen)
    preload = _read_exact(blen).decode()
    ns = {"__name__": "grpo_preload"}
    try:
        exec(compile(preload, "<preload>", "exec"), ns)
    except BaseException:
        _send({"error": traceback.format_exc()})
        os._exit(1)
    # Objects that exist now are never collected: a child's first collection then does not
    # touch (and copy-on-write) every page of the zygote's heap.
    gc.collect()
    gc.freeze()
    _send({"ready": True})
    while True:
        hlen, blen = struct.unpack("<II", _read_exact(8))
        raw = _read_exact(hlen)
        body = _read_exact(blen)
        try:
            _call(json.loads(raw), body, ns)
        except BaseException:
            _send({"error": traceback.format_exc()})


main()
