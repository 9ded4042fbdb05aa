"""BatchClient: the trainer's end of the NNG transport (docs/bridge.md, "Protocol").

The trainer pulls with a REQ socket, or, when the publisher announces one, on a plain stream
socket beside it (TCP for tcp://, an abstract unix socket for ipc://: the same messages, each
after its u64 length, without NNG's threads and copies; requests go over NNG again by themselves
when the stream cannot be reached or breaks). Every GET carries the ids it acknowledges and the
ids it still holds (received, not yet acknowledged); the publisher answers with the first
unacknowledged batch the trainer does not hold. A lost reply, a publisher restart or a trainer restart therefore only
means the batch comes again: delivery is at least once, and Batch.batch_id lets the trainer drop
duplicates (keep the ids of processed batches with the checkpoint)."""
import hashlib
import json
import os
import socket
import struct
import sys
import time

import pynng

from .batch import decode_batch

MAGIC = b"GRPB"
VERSION = 1
HELLO, GET, ACK, WEIGHTS, WCHUNK, PART = 1, 2, 3, 4, 5, 6
READY, BATCH, NONE, END, OK, ERROR, PARTDATA = 65, 66, 67, 68, 69, 70, 71
_HDR = struct.Struct("<4sBBHqqII")  # 32 bytes


class BridgeError(RuntimeError):
    pass


class _SharedChanged(Exception):
    """The publisher rewrote the slot before or while it was read: ask again."""


_SHM_HDR = 64


def _read_shared(ref):
    """The batch bytes a BATCH reply references in the publisher's memory (ipc:// only): its memfd
    opened as /proc/PID/fd/FD and read once, the slot's token and generation checked before and
    after (docs/bridge.md, "Same-host payloads"). OSError: this process cannot open the
    publisher's memory; _SharedChanged: ask again."""
    try:
        pid, fd, gen, n = (int(ref[k]) for k in ("pid", "fd", "gen", "len"))
        token = bytes.fromhex(ref["token"])
    except (KeyError, TypeError, ValueError) as e:
        raise BridgeError("bridge: malformed shared-memory reference: %s" % e)
    if len(token) != 16 or pid < 1 or fd < 0 or n < 0:
        raise BridgeError("bridge: malformed shared-memory reference")
    f = os.open("/proc/%d/fd/%d" % (pid, fd), os.O_RDONLY | os.O_CLOEXEC)
    try:
        def stable():
            h = os.pread(f, _SHM_HDR, 0)
            if len(h) < _SHM_HDR or h[:16] != token:
                raise OSError("bridge: /proc/%d/fd/%d is not the publisher's batch file" % (pid, fd))
            return struct.unpack_from("<QQ", h, 16) == (gen, n)
        if not stable():
            raise _SharedChanged()
        buf = bytearray(n)
        view, got = memoryview(buf), 0
        while got < n:
            k = os.preadv(f, [view[got:]], _SHM_HDR + got)
            if k <= 0:
                raise OSError("bridge: short read of the publisher's batch")
            got += k
        if not stable():
            raise _SharedChanged()
        return buf
    finally:
        os.close(f)


class EndOfStream(Exception):
    pass


class _NotSmaller(Exception):
    pass


def _pack(mtype, a=0, b=0, js=None, payload=b""):
    j = json.dumps(js).encode() if js is not None else b""
    return _HDR.pack(MAGIC, VERSION, mtype, 0, a, b, len(j), 0) + j + payload


def _unpack(buf):
    if len(buf) < _HDR.size:
        raise BridgeError("bridge: short reply")
    magic, ver, mtype, _, a, b, jl, _ = _HDR.unpack_from(buf)
    if magic != MAGIC or ver != VERSION:
        raise BridgeError("bridge: reply is not protocol %d" % VERSION)
    js = json.loads(bytes(buf[_HDR.size:_HDR.size + jl])) if jl else None
    return mtype, a, b, js, memoryview(buf)[_HDR.size + jl:]


class BatchClient:
    """Iterates batches from a grpo publisher at url (tcp://host:port or ipc:///path).

    for batch in client: ...        each batch is acknowledged when the loop asks for the next
                                    one, i.e. after the caller's step (auto_ack=True); breaking
                                    out of the loop does not acknowledge the current batch
    with client.next() as batch:    acknowledged when the block ends without an exception
    batch = client.next(); ...; client.ack(batch)   explicit
    """

    def __init__(self, url, run_id=None, auto_ack=True, slice_ms=5000, connect_timeout=None,
                 chunk_bytes=1 << 20, stream=True):
        self.url = url
        self.auto_ack = auto_ack
        self._slice_ms = slice_ms
        self._acks = []
        self._held = []
        # same-host payloads: the batch read from the publisher's memory, not carried in NNG
        # messages; off by itself when this process cannot open it (another container or user)
        self.shared_memory = url.startswith("ipc://") and os.environ.get("GRPO_BRIDGE_SHM") != "0"
        self.last_shared = False  # whether the last batch came through shared memory
        self.last_parts = 0  # how many messages the last batch came in (0: shared memory)
        # batches over chunk_bytes come in parts of it (None or 0: whole messages)
        self.chunk_bytes = min(max(int(chunk_bytes), 256), 1 << 30) if chunk_bytes else 0
        self._shm_fails = 0
        self._stream = None  # the publisher's stream socket, once connected
        self._want_stream = stream and os.environ.get("GRPO_BRIDGE_STREAM") != "0"
        self._stream_was_up = False  # once connected, a broken stream is sought again:
        self._stream_retry_at, self._stream_backoff = 0.0, 1.0  # after 1, 2, 4, ... 60 s
        self._sbuf = bytearray()
        self.last_streamed = False  # whether the last batch's reply came on the stream
        self._sock = pynng.Req0(recv_max_size=0, resend_time=slice_ms,
                                reconnect_time_min=20, reconnect_time_max=500)
        self._sock.dial(url, block=False)
        self.ready = self._request(_pack(HELLO, js={"run_id": run_id} if run_id else {}),
                                   timeout=connect_timeout)[3] or {}
        self.run_id = self.ready.get("run_id")
        self.window = self.ready.get("window")
        if self._want_stream:
            self._stream_up(self.ready.get("stream"))

    # -- the stream ------------------------------------------------------------------------------

    def _stream_up(self, ann):
        """Connects the stream READY announced ({"port"} over tcp://, {"unix"} over ipc://, and a
        token). One that cannot be reached at first is given up (requests over NNG); one that
        broke is sought again by _stream_again."""
        if not isinstance(ann, dict) or not isinstance(ann.get("token"), str):
            if self._stream_was_up:
                self._stream_later()
            return
        try:
            token = bytes.fromhex(ann["token"])
            if len(token) != 16:
                return
            if self.url.startswith("tcp://") and isinstance(ann.get("port"), int):
                host = self.url[6:].rsplit(":", 1)[0].strip("[]")
                s = socket.create_connection((host if host not in ("", "*") else "127.0.0.1",
                                              ann["port"]), timeout=2)
                s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            elif self.url.startswith("ipc://") and isinstance(ann.get("unix"), str):
                s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                s.settimeout(2)
                s.connect("\0" + ann["unix"])
            else:
                return
            s.sendall(token + bytes(16))
            self._stream = s
            if self._stream_recv()[0] != READY:
                raise BridgeError("the stream did not answer READY")
            s.settimeout(max(10.0, self._slice_ms / 1000 * 2))
            self._stream_was_up, self._stream_backoff = True, 1.0
        except (OSError, ValueError, BridgeError) as e:
            if self._stream is not None:
                self._stream.close()
                self._stream = None
            if self._stream_was_up:
                self._stream_later()
            else:
                print("grpo_bridge: bridge %s: its stream cannot be had (%s); requests go over NNG"
                      % (self.url, e), file=sys.stderr)
                self._want_stream = False

    def _stream_later(self):
        self._stream_retry_at = time.monotonic() + self._stream_backoff
        self._stream_backoff = min(60.0, self._stream_backoff * 2)

    def _stream_again(self):
        """After the stream broke (a publisher restart): a new HELLO for the new announcement."""
        if self._stream is None and self._want_stream and self._stream_was_up and \
                time.monotonic() >= self._stream_retry_at:
            try:
                ready = self._request(_pack(HELLO, js={}), timeout=2)[3] or {}
            except (TimeoutError, BridgeError):
                ready = {}
            self._stream_up(ready.get("stream"))

    def _stream_fail(self, e):
        if self._stream is not None:
            print("grpo_bridge: bridge %s: the stream failed (%s); requests go over NNG until it "
                  "is back" % (self.url, e), file=sys.stderr)
            self._stream.close()
        self._stream = None
        self._stream_later()

    def _stream_recv(self):
        """One reply from the stream, parsed (its payload a view of this client's buffer)."""
        pre = bytearray(8)
        self._recv_into(memoryview(pre))
        n = struct.unpack("<Q", pre)[0]
        if n < _HDR.size or n > 1 << 40:
            raise BridgeError("bridge %s: a stream message of %d bytes" % (self.url, n))
        if len(self._sbuf) != n:
            self._sbuf = bytearray(n)
        self._recv_into(memoryview(self._sbuf))
        return _unpack(self._sbuf)

    def _recv_into(self, view):
        """Fills view from the stream."""
        got = 0
        while got < len(view):
            k = self._stream.recv_into(view[got:])
            if k <= 0:
                raise OSError("the publisher closed the stream")
            got += k

    # -- requests ------------------------------------------------------------------------------

    def _checked(self, r):
        """A parsed reply, or BridgeError when it is the publisher's ERROR."""
        if r[0] == ERROR:
            raise BridgeError("bridge %s: publisher says: %s" % (self.url, (r[3] or {}).get("error")))
        return r

    def _get(self, msg, timeout=None):
        """A GET on the stream when there is one (its reply whole before the next request goes
        out), else over NNG; the stream given up on any failure, and the GET sent again over
        NNG (it is idempotent)."""
        self._stream_again()
        self.last_streamed = self._stream is not None
        if self._stream is not None:
            try:
                self._stream.sendall(struct.pack("<Q", len(msg)) + msg)
                return self._checked(self._stream_recv())
            except OSError as e:  # socket.timeout included
                self._stream_fail(e)
                self.last_streamed = False
        return self._request(msg, timeout)

    def _request(self, msg, timeout=None):
        """Sends msg, resending every slice until a reply comes (requests are idempotent)."""
        t0 = time.monotonic()
        while True:
            self._sock.send(msg)
            left = None if timeout is None else timeout - (time.monotonic() - t0)
            wait = self._slice_ms if left is None else max(1, min(self._slice_ms, int(left * 1000)))
            self._sock.recv_timeout = wait
            try:
                r = _unpack(self._sock.recv())
            except pynng.Timeout:
                if left is not None and time.monotonic() - t0 >= timeout:
                    raise TimeoutError("bridge %s: no answer within %.1f s" % (self.url, timeout))
                continue
            return self._checked(r)

    def next(self, timeout=None):
        """The next Batch; raises EndOfStream when the publisher finished, TimeoutError after
        timeout seconds without a batch (None = wait forever)."""
        t0 = time.monotonic()
        while True:
            ids = self._acks + self._held
            payload = struct.pack("<%dq" % len(ids), *ids)
            left = None if timeout is None else max(0.001, timeout - (time.monotonic() - t0))
            mtype, a, b, js, body = self._get(
                _pack(GET, len(self._acks), len(self._held),
                      {"shm": int(self.shared_memory), "chunk": self.chunk_bytes}, payload),
                timeout=left)
            self._acks = []
            self.last_shared = mtype == BATCH and isinstance(js, dict) and "shm" in js
            self.last_parts = 0 if self.last_shared else 1
            if self.last_shared:
                try:
                    body = _read_shared(js["shm"])
                except _SharedChanged:
                    continue  # not held yet: the next GET returns it (or a newer one)
                except OSError as e:
                    # a publisher that died after its reply is asked again; one this process
                    # cannot open 3 times in a row (another namespace or user): the messages
                    self._shm_fails += 1
                    if self._shm_fails >= 3:
                        print("grpo_bridge: %s; batches come in the messages from now on" % e,
                              file=sys.stderr)
                        self.shared_memory = False
                    continue
                self._shm_fails = 0
            elif mtype == BATCH and isinstance(js, dict) and "total" in js:
                body = self._parts(a, body, js["total"])
                if body is None:
                    continue  # the publisher no longer has it: not held, so asked for again
            if mtype == BATCH:
                if a not in self._held:
                    self._held.append(a)
                return decode_batch(body, client=self)
            if mtype == END:
                raise EndOfStream()
            if mtype != NONE:
                raise BridgeError("bridge %s: unexpected reply %d" % (self.url, mtype))
            if timeout is not None and time.monotonic() - t0 >= timeout:
                raise TimeoutError("bridge %s: no batch within %.1f s" % (self.url, timeout))

    def _parts(self, batch_id, first, total):
        """A batch the publisher sends in parts: the first part, then PART requests for the rest
        (one message of the whole size never exists on either side). None when the publisher no
        longer holds it."""
        if not isinstance(total, int) or total < len(first) or not len(first):
            raise BridgeError("bridge %s: a first part of %d bytes for a batch of %r"
                              % (self.url, len(first), total))
        buf = bytearray(total)
        buf[:len(first)] = first
        got = len(first)
        while got < total:
            mtype, a, b, _, part = self._request(
                _pack(PART, batch_id, got, {"len": self.chunk_bytes or (1 << 30)}))
            if mtype == NONE:
                return None
            if mtype != PARTDATA or a != batch_id or b != got or not len(part) or len(part) > total - got:
                raise BridgeError("bridge %s: a part that does not continue batch %d at %d"
                                  % (self.url, batch_id, got))
            buf[got:got + len(part)] = part
            got += len(part)
            self.last_parts += 1
        return buf

    def ack(self, batch, flush=False):
        """Acknowledges a Batch (or a batch id): sent with the next request, or now (flush)."""
        bid = batch if isinstance(batch, int) else batch.batch_id
        if not isinstance(batch, int):
            batch.acked = True
        if bid in self._held:
            self._held.remove(bid)
        if bid not in self._acks:
            self._acks.append(bid)
        if flush:
            self.flush()

    def flush(self):
        """Sends pending acknowledgements now."""
        if self._acks:
            ids = list(self._acks)
            self._request(_pack(ACK, len(ids), 0, None, struct.pack("<%dq" % len(ids), *ids)))
            self._acks = [i for i in self._acks if i not in ids]

    def __iter__(self):
        while True:
            try:
                batch = self.next()
            except EndOfStream:
                return
            yield batch
            if self.auto_ack and not batch.acked:
                self.ack(batch)

    # -- weights -------------------------------------------------------------------------------

    def set_base(self, version, data):
        """Declares the safetensors image the rollout side runs as version (e.g. version 0, the
        model's own model.safetensors) so that the next delta can be against it."""
        self._sent = (version, bytes(data))

    def publish_weights(self, state_dict, version, shared_dir=None, chunk_bytes=16 << 20,
                        delta=False):
        """Sends a new policy version to the rollout side as safetensors.

        shared_dir: a folder both sides can read; the file is written there (atomically) and only
        its path and sha256 travel. Without it the bytes go inline over NNG in chunks. Values may
        be torch tensors or numpy arrays. delta=True sends only what changed since the last
        version sent (or set_base), schemas/weights_delta.md, when that is smaller than the full
        weights (else the full weights); delta="always" sends the delta even when it is not
        smaller (for measuring). A delta the rollout side refuses (it does not hold that version,
        or anything else) is followed by the full weights.
        Returns the sha256 of the full weights (the same either way); self.last_publish says
        what was sent: kind ("full", "delta", "full after refused delta"), bytes, seconds."""
        t0 = time.monotonic()
        data = _serialize(state_dict, version)
        sha = hashlib.sha256(data).hexdigest()
        self.last_publish = {"version": version, "full_bytes": len(data)}
        base = getattr(self, "_sent", None)
        if delta and base is not None and base[0] < version:
            from .delta import encode_delta
            d, _ = encode_delta(base[1], data, base[0], version)
            if len(d) >= len(data) and delta != "always":  # e.g. a dense step: every block
                self.last_publish["refused"] = "the delta is not smaller than the full weights"
                d = None
            try:
                if d is None:
                    raise _NotSmaller()
                self._send(d, version, sha, shared_dir, chunk_bytes, base[0])
                self._sent = (version, data)
                self.last_publish.update(kind="delta", bytes=len(d), base_version=base[0],
                                         seconds=time.monotonic() - t0)
                return sha
            except _NotSmaller:
                pass
            except BridgeError as e:
                self.last_publish["refused"] = str(e)
        self._send(data, version, sha, shared_dir, chunk_bytes, None)
        self._sent = (version, data)
        r = self.last_publish.get("refused")
        self.last_publish.update(kind="full" if r is None else "full (delta not smaller)"
                                 if r.startswith("the delta is not") else
                                 "full after refused delta", bytes=len(data),
                                 seconds=time.monotonic() - t0)
        return sha

    def _send(self, data, version, sha, shared_dir, chunk_bytes, delta_base):
        extra = {} if delta_base is None else {"delta_base": delta_base}
        if shared_dir is not None:
            name = "policy-v%d%s.safetensors" % (version, "" if delta_base is None else ".delta")
            path = os.path.join(os.path.abspath(shared_dir), name)
            tmp = path + ".tmp%d" % os.getpid()
            with open(tmp, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
            self._request(_pack(WEIGHTS, version, 0, dict(path=path, sha256=sha, **extra)))
            return
        n = max(1, -(-len(data) // chunk_bytes))
        for i in range(n):
            js = {"n_chunks": n}
            if i == 0:
                js.update(bytes=len(data), sha256=sha, **extra)
            self._request(_pack(WCHUNK, version, i, js, data[i * chunk_bytes:(i + 1) * chunk_bytes]))

    # -- lifetime ------------------------------------------------------------------------------

    def close(self):
        try:
            self.flush()
        finally:
            self._close_sockets()

    def _close_sockets(self):
        if self._stream is not None:
            self._stream.close()
            self._stream = None
        self._sock.close()

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        if exc_type is None:
            self.close()
        else:
            self._close_sockets()
        return False


def _serialize(state_dict, version):
    meta = {"policy_version": str(version)}
    first = next(iter(state_dict.values()), None)
    if first is not None and type(first).__module__.startswith("torch"):
        import safetensors.torch
        return safetensors.torch.save({k: v.detach().contiguous().cpu() for k, v in state_dict.items()},
                                      metadata=meta)
    import numpy as np
    import safetensors.numpy
    return safetensors.numpy.save({k: np.ascontiguousarray(v) for k, v in state_dict.items()},
                                  metadata=meta)
