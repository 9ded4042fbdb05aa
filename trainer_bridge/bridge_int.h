/* Private declarations shared by the trainer_bridge/ files: offset checks, the safetensors header
 * parser (batches and weight files) and the wire protocol of the NNG transport. */
#ifndef GRPO_BRIDGE_INT_H
#define GRPO_BRIDGE_INT_H

#include "common/common_int.h"
#include "common/safetensors.h"
#include "grpo/bridge.h"

#include <pthread.h>

grpo_err grpo_bridge__check_groups(const int64_t *offsets, size_t n_groups, size_t n,
                                   const char *where);
grpo_err grpo_bridge__check_offsets(const int64_t *off, size_t n_seq, const char *where);

/* Encodes into o (o->len is reset; its memory is reused). */
grpo_err grpo_bridge__encode_into(const grpo_batch *b, grpo_buf *o);
/* The two halves of an encoding, for a destination sized first (a shared-memory slot): head
 * validates b and writes the length prefix and the JSON header into o (reset, memory reused),
 * with *data_len the bytes of tensor data that follow it; data writes exactly those at dst and
 * fails when route ids that head left to it are wrong (the destination is then not used). */
grpo_err grpo_bridge__encode_head(const grpo_batch *b, grpo_buf *o, uint64_t *data_len);
grpo_err grpo_bridge__encode_data(const grpo_batch *b, uint8_t *dst);

/* Routes of a version-2 batch (batch_routes.c). */
typedef struct {
    const grpo__st_tensor *offsets, *prompt, *completion;
} grpo_bridge__route_tensors;
/* Invariants of b's routes (none to check without HAS_ROUTES); ids = 0 leaves out the ids that
 * routes_data checks while it copies them. */
grpo_err grpo_bridge__routes_check(const grpo_batch *b, int ids);
/* 1 when name is a route tensor's. */
int grpo_bridge__routes_is_name(const char *name);
/* 1 when f holds any of the route tensors. */
int grpo_bridge__routes_any(const grpo__st_header *f);
/* Header entries of the route tensors whose bytes go at *pos: pass 0 the offsets (8-byte), pass
 * 1 the ids; *pos advances. Nothing without HAS_ROUTES. */
grpo_err grpo_bridge__routes_header(grpo_buf *o, const grpo_batch *b, int pass, uint64_t *pos);
/* Writes pass 0 (offsets) or 1 (ids) at dst and returns the end; ids that routes_check(b, 0)
 * left unchecked are checked on the way, *err set when they are wrong (the bytes are written all
 * the same: the encoding is then not used). */
uint8_t *grpo_bridge__routes_data(uint8_t *dst, const grpo_batch *b, int pass, grpo_err *err);
/* Finds and shape-checks the route tensors of a parsed file of the given version (all three in
 * version 2, none in version 1) and sizes them into b (grpo_batch_set_routes) when b is not NULL;
 * experts from the metadata. */
grpo_err grpo_bridge__routes_tensors(const grpo__st_header *f, int64_t version, uint64_t n_seq,
                                     int64_t experts, grpo_bridge__route_tensors *rt);
grpo_err grpo_bridge__routes_read(grpo_batch *b, const grpo__st_header *f,
                                  const grpo_bridge__route_tensors *rt, int64_t experts,
                                  const void *bytes);

/* ---- safetensors ---------------------------------------------------------------------------- */

/* The shared parser (common/safetensors.h) under the bridge's names. */
typedef grpo__st_dtype st_dtype;
#define ST_BOOL GRPO__ST_BOOL
#define ST_U8 GRPO__ST_U8
#define ST_I8 GRPO__ST_I8
#define ST_I16 GRPO__ST_I16
#define ST_U16 GRPO__ST_U16
#define ST_F16 GRPO__ST_F16
#define ST_BF16 GRPO__ST_BF16
#define ST_I32 GRPO__ST_I32
#define ST_U32 GRPO__ST_U32
#define ST_F32 GRPO__ST_F32
#define ST_F64 GRPO__ST_F64
#define ST_I64 GRPO__ST_I64
#define ST_U64 GRPO__ST_U64
#define ST_F8_E4M3 GRPO__ST_F8_E4M3
#define ST_F8_E5M2 GRPO__ST_F8_E5M2
#define ST_N_DTYPES GRPO__ST_N_DTYPES

#define ST_MAX_DIMS GRPO__ST_MAX_DIMS
#define ST_MAX_NAME 256 /* tensor names are 1..255 bytes */

typedef grpo__st_tensor st_tensor;
typedef grpo__st_header st_file;

size_t grpo_bridge__st_dtype_size(st_dtype d);
const char *grpo_bridge__st_dtype_name(st_dtype d);
/* Parses and validates a header (json, json_len) for a data section of data_len bytes: dtypes,
 * shapes, sizes, offsets in bounds, no overlap, no gap (the shared parser, strict options). */
grpo_err grpo_bridge__st_parse_header(const char *json, size_t json_len, uint64_t data_len,
                                      const char *where, st_file *out);
/* Whole buffer: 8-byte length, header, data. */
grpo_err grpo_bridge__st_parse(const void *bytes, size_t len, const char *where, st_file *out);
void grpo_bridge__st_free(st_file *f);
const st_tensor *grpo_bridge__st_find(const st_file *f, const char *name);
const char *grpo_bridge__st_meta(const st_file *f, const char *key);

/* ---- wire protocol (docs/bridge.md, "Protocol") ------------------------------------------------
 * Every message starts with a 32-byte little-endian header:
 *   0  "GRPB"     4  u8 protocol version (1)   5  u8 type   6  u16 flags (0)
 *   8  i64 a      16 i64 b                     24 u32 json_len   28 u32 reserved (0)
 * followed by json_len bytes of JSON (may be 0) and a binary payload (the rest). */
#define GRPB_MAGIC "GRPB"
#define GRPB_VERSION 1
#define GRPB_HDR 32
/* Batches in parts (GET JSON {"chunk": N}): N within these bounds, else whole batches. */
#define GRPB_CHUNK_MIN ((size_t)256)
#define GRPB_CHUNK_MAX ((size_t)1 << 30)

enum {
    /* trainer -> publisher (requests) */
    GRPB_HELLO = 1,   /* json {run_id?, consumer?}; resets nothing, answered READY */
    GRPB_GET = 2,     /* payload: n_acks i64 ids then n_held i64 ids; a = n_acks, b = n_held */
    GRPB_ACK = 3,     /* payload: a acks; answered OK */
    GRPB_WEIGHTS = 4, /* a = version; json {path, sha256}; answered OK or ERROR */
    GRPB_WCHUNK = 5,  /* a = version, b = chunk index; json {n_chunks, bytes, sha256} on chunk 0
                       * and json {n_chunks} after; payload = chunk bytes; answered OK/ERROR */
    GRPB_PART = 6,    /* a = batch id, b = offset; json {len}: the rest of a batch whose BATCH
                       * reply said {total}; answered PART, or NONE when it is no longer queued */
    /* publisher -> trainer (replies) */
    GRPB_READY = 65, /* json {run_id, window, schema, schema_version, weights_version} */
    GRPB_BATCH = 66, /* a = batch id, b = policy version; payload = safetensors bytes */
    GRPB_NONE = 67,  /* nothing to send yet (long poll expired); a = unacked count */
    GRPB_END = 68,   /* the stream is finished and every batch acknowledged */
    GRPB_OK = 69,
    GRPB_ERROR = 70,   /* json {error} */
    GRPB_PARTDATA = 71 /* a = batch id, b = offset; payload = bytes [b, b + len) of the batch */
};

typedef struct {
    int type;
    int64_t a, b;
    const char *json; /* not NUL-terminated */
    size_t json_len;
    const uint8_t *payload;
    size_t payload_len;
} grpb_msg;

/* nng_msg_alloc for a message the caller fills before sending. A large body is marked for
 * transparent huge pages before its first write: NNG allocates every message afresh, glibc maps
 * one over 32 MiB straight from the kernel and unmaps it on free, so at 4 KiB each page of every
 * batch would be faulted and cleared on its own (they topped the 64 MiB profile). */
struct nng_msg;
int grpo_bridge__msg_alloc(struct nng_msg **m, size_t len);
/* Marks [p, p + len) for transparent huge pages when it spans at least 4 MiB (whole pages
 * inside it only; a hint, so a refusal is ignored). For memory about to be written first. */
void grpo_bridge__hint_huge(void *p, size_t len);

/* ---- same-host payloads (shm.c) ----------------------------------------------------------------
 * Over ipc:// a trainer that asks for it (GET with JSON {"shm": 1}) gets each batch as a
 * reference to a memfd slot of the publisher (BATCH reply with JSON {"shm": {pid, fd, token,
 * gen, len}} and no payload) and reads it with one pread; docs/bridge.md, "Protocol". */
typedef struct {
    int fd;            /* the memfd; -1 when closed */
    uint8_t token[16]; /* random, checked by the reader: the fd number alone could be reused */
    uint64_t gen;      /* even when stable; bumped by every write */
    size_t len;        /* payload bytes of the current generation */
    uint8_t *map;      /* the file mapped (header and payload), map_len bytes */
    size_t map_len;
} grpo_bridge__shm_slot;

grpo_err grpo_bridge__shm_open(grpo_bridge__shm_slot *s);
void grpo_bridge__shm_close(grpo_bridge__shm_slot *s);
/* Replaces the slot's payload: begin makes room for len bytes, marks the generation odd and
 * gives where they go; commit publishes them (the next even generation). write = both, copying. */
grpo_err grpo_bridge__shm_begin(grpo_bridge__shm_slot *s, size_t len, uint8_t **dst);
void grpo_bridge__shm_commit(grpo_bridge__shm_slot *s, size_t len);
grpo_err grpo_bridge__shm_write(grpo_bridge__shm_slot *s, const void *bytes, size_t len);
/* The committed payload (s->len bytes), valid until the slot is written again or closed. */
const void *grpo_bridge__shm_payload(const grpo_bridge__shm_slot *s);
/* The BATCH reply's JSON naming the slot's current generation. */
void grpo_bridge__shm_ref(const grpo_bridge__shm_slot *s, char *json, size_t cap);
/* A trainer's mappings of the publisher's slots, each mapped once and reused. */
#define GRPO_BRIDGE__SHM_MAPS 8
typedef struct {
    int pid, fd;
    uint8_t token[16];
    uint8_t *map; /* NULL: free */
    size_t len;
} grpo_bridge__shm_map;
typedef struct {
    grpo_bridge__shm_map m[GRPO_BRIDGE__SHM_MAPS];
    unsigned next; /* the entry replaced next when none is free */
} grpo_bridge__shm_maps;
void grpo_bridge__shm_maps_fini(grpo_bridge__shm_maps *maps);
/* Reads the batch a reply's JSON references into out (its memory reused). *referenced is 0 for a
 * reply without a reference (nothing read). GRPO_ESTATE: the slot was rewritten before or while
 * it was read (ask again); other errors: this trainer cannot read the publisher's memory (fall
 * back to payloads in the messages). max_len bounds the size (0: none). With maps (may be NULL)
 * a slot sealed against shrinking is copied out of a mapping kept there, else read with pread. */
grpo_err grpo_bridge__shm_read(const char *json, size_t json_len, size_t max_len,
                               grpo_bridge__shm_maps *maps, grpo_buf *out, int *referenced);

/* ---- the conversation on a plain stream socket (stream.c) --------------------------------------
 * A trainer that connected the stream its publisher announced in READY (JSON {"stream": {"port"
 * (tcp://) or "unix" (ipc://: an abstract socket's name), "token"}}) sends its GET and ACK
 * requests on it, each message after its u64 length, and reads the replies in order: batches
 * inline, or over ipc:// as memfd references; docs/bridge.md, "Protocol". */
typedef struct grpo_bridge__stream_out grpo_bridge__stream_out; /* one trainer's, publisher side */
typedef struct {
    void *ctx;
    /* Answers one GET or ACK read from a stream with exactly one grpo_bridge__stream_reply (on
     * the stream's own thread: one per trainer). */
    void (*serve)(void *ctx, const grpb_msg *req, grpo_bridge__stream_out *out);
} grpo_bridge__stream_host;
typedef struct grpo_bridge__streams grpo_bridge__streams;

/* Listens on an ephemeral port of the host of a tcp:// url, or on an abstract unix socket for an
 * ipc:// one (*out stays NULL otherwise, or when no socket could be had, which only means
 * trainers talk over NNG). */
grpo_err grpo_bridge__streams_open(grpo_bridge__streams **out, const char *url,
                                   const grpo_bridge__stream_host *h);
/* Ends every conversation and closes every socket; NULL is a no-op. serve() must return (the
 * publisher's stop wakes a GET that waits). */
void grpo_bridge__streams_close(grpo_bridge__streams *s);
/* What READY announces: the port (tcp://), or *unix_name (ipc://; else NULL), with the token
 * trainers send (32 hex digits); 0 when s is NULL. */
int grpo_bridge__streams_port(const grpo_bridge__streams *s, const char **unix_name,
                              char token_hex[33]);
/* Writes one reply; -1 once the stream is broken (the conversation then ends). */
int grpo_bridge__stream_reply(grpo_bridge__stream_out *out, int type, int64_t a, int64_t b,
                              const char *json, const void *payload, size_t plen);

/* The trainer's end of a stream. */
typedef struct {
    int fd; /* -1: none */
} grpo_bridge__stream_in;
/* Connects to port on url's host (or to the abstract unix socket unix_name when not NULL) and
 * registers (token from READY, hex) within timeout_ms; reads and writes give up after stall_ms
 * without progress. */
grpo_err grpo_bridge__stream_connect(grpo_bridge__stream_in *in, const char *url, int port,
                                     const char *unix_name, const char *token_hex, int timeout_ms,
                                     int stall_ms);
/* One request: header, json, then payloads p1 and p2. */
grpo_err grpo_bridge__stream_send(grpo_bridge__stream_in *in, int type, int64_t a, int64_t b,
                                  const char *json, const void *p1, size_t n1, const void *p2,
                                  size_t n2);
/* Waits up to timeout_ms (-1: forever) for a reply to begin: 1 it has, 0 not yet, -1 broken. */
int grpo_bridge__stream_wait(grpo_bridge__stream_in *in, int timeout_ms);
/* The next reply, whole, into msg (its memory reused; parse it with grpo_bridge__msg_parse). */
grpo_err grpo_bridge__stream_recv(grpo_bridge__stream_in *in, grpo_buf *msg);
void grpo_bridge__stream_close(grpo_bridge__stream_in *in);

/* Parses a received message (bounds-checked). */
grpo_err grpo_bridge__msg_parse(const void *buf, size_t len, grpb_msg *m);
/* Writes the 32-byte header into hdr. */
void grpo_bridge__msg_header(uint8_t hdr[GRPB_HDR], int type, int64_t a, int64_t b,
                             size_t json_len);

/* Little-endian helpers. */
void grpo_bridge__put_u64(uint8_t *p, uint64_t v);
uint64_t grpo_bridge__get_u64(const uint8_t *p);

/* Translates an NNG error code into GRPO_ENET (or ETIMEOUT) with a message. */
grpo_err grpo_bridge__nng_fail(int rv, const char *what, const char *url);

#endif
