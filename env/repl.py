# The python tool's REPL (env/repl.c starts it in a long-lived sandbox as `python -I -B -c THIS
# LIMITS_JSON`). fd 3 is the control socket. Each request is one cell: exec()d in one globals
# dict kept for the whole episode, with sys.stdout/sys.stderr captured per cell (up to the caps;
# the rest counted). Like a notebook cell, when the last statement is an expression its value is
# shown (repr, unless None), after the output of the statements before it.
# Frames: request = u32 code length, 16-byte nonce, code (UTF-8)
#         reply   = u32 hlen, u32 olen, u32 elen, header JSON, stdout, stderr
# The header is {"nonce": hex, "status": "ok"|"error"|"memory"|"output", "out_total": n,
# "err_total": n}; one unsolicited reply with status "ready" (nonce "") is sent at start.
# The code shares this process and can write to fd 3 itself: the host checks the nonce and sizes.
import ast, builtins, io, json, linecache, os, resource, struct, sys, traceback

CTL = 3
LIM = json.loads(sys.argv[1])
HERE = sys._getframe().f_code.co_filename


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
    view = memoryview(struct.pack("<III", len(h), len(out), len(err)) + h + out + err)
    while view:
        view = view[os.write(CTL, view):]


class _Flood(BaseException):
    pass


class _Sink:
    # keeps the first cap bytes (stdout) or the last (stderr: a traceback ends with the error)
    def __init__(self, cap, tail=False):
        self.cap, self.tail = cap, tail
        self.data = bytearray()
        self.total = 0

    def put(self, b):
        self.total += len(b)
        if self.tail:
            self.data += b[-self.cap:] if self.cap else b""
            if len(self.data) > 2 * self.cap:
                del self.data[: len(self.data) - self.cap]
        else:
            room = self.cap - len(self.data)
            if room > 0:
                self.data += b[:room]
        kill = LIM.get("output_kill", 0)
        if kill and self.total > kill:
            raise _Flood()


class _Bin(io.RawIOBase):
    def __init__(self, sink):
        self.sink = sink

    def writable(self):
        return True

    def write(self, b):
        b = bytes(b)
        self.sink.put(b)
        return len(b)


class _Text(io.TextIOBase):
    encoding = "utf-8"
    errors = "backslashreplace"

    def __init__(self, sink):
        self.sink = sink
        self.buffer = _Bin(sink)

    def writable(self):
        return True

    def isatty(self):
        return False

    def write(self, s):
        if not isinstance(s, str):
            raise TypeError("write() argument must be str, not %s" % type(s).__name__)
        self.sink.put(s.encode("utf-8", "backslashreplace"))
        return len(s)


def _cpu_limit():
    # RLIMIT_CPU per cell: what the process used so far plus the cell's allowance
    ms = LIM.get("cpu_ms", 0)
    if not ms:
        return
    ru = resource.getrusage(resource.RUSAGE_SELF)
    used = int(ru.ru_utime + ru.ru_stime) + 1
    try:
        resource.setrlimit(resource.RLIMIT_CPU, (used + (ms + 999) // 1000, resource.RLIM_INFINITY))
    except (ValueError, OSError):
        pass


def _show_error(e, err):
    # the traceback without this file's frames
    tb = e.__traceback__
    while tb is not None and tb.tb_frame.f_code.co_filename == HERE:
        tb = tb.tb_next
    traceback.print_exception(type(e), e, tb, file=err)


def _cell(src, n, g, out, err):
    name = "<cell-%d>" % n
    linecache.cache[name] = (len(src), None, src.splitlines(True), name)
    try:
        tree = ast.parse(src, name, "exec")
        last = None
        if tree.body and isinstance(tree.body[-1], ast.Expr):
            last = ast.Expression(tree.body.pop().value)
        exec(compile(tree, name, "exec"), g)
        if last is not None:
            v = eval(compile(last, name, "eval"), g)
            if v is not None:
                out.write(repr(v) + "\n")
        return "ok"
    except _Flood:
        return "output"
    except MemoryError as e:
        g.pop("_", None)
        _show_error(e, err)
        return "memory"
    except BaseException as e:  # SystemExit too: the REPL goes on, like a notebook's
        _show_error(e, err)
        return "error"


def main():
    g = {"__name__": "__main__", "__builtins__": builtins}
    _send({"nonce": "", "status": "ready", "out_total": 0, "err_total": 0})
    n = 0
    while True:
        size, nonce = struct.unpack("<I16s", _read_exact(20))
        data = _read_exact(size)
        n += 1
        o = _Sink(LIM.get("stdout_max", 1 << 20))
        e = _Sink(LIM.get("stderr_max", 1 << 16), True)
        out, err = _Text(o), _Text(e)
        sys.stdout, sys.stderr = out, err
        _cpu_limit()
        try:
            status = _cell(data.decode("utf-8", "replace"), n, g, out, err)
        except _Flood:  # raised again while showing the error
            status = "output"
        sys.stdout, sys.stderr = sys.__stdout__, sys.__stderr__
        hdr = {"nonce": nonce.hex(), "status": status, "out_total": o.total, "err_total": e.total}
        _send(hdr, bytes(o.data), bytes(e.data[len(e.data) - min(len(e.data), e.cap):]))


main()
