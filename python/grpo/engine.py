"""grpo.Engine: G completions per prompt from a model directory, in process, through libgrpo's
public rollout API (include/grpo/rollout.h: policy, scheduler, sampler, tokenizer), scored by the
verifiers and turned into group-relative advantages the way `grpo rollout` does. With the same
model, prompts, sampling parameters and seed it gives `grpo rollout`'s completions, bit for bit
(tests/python/test_engine.py): a completion is a function of the weights, the prompt, the
parameters, the seed, the prompt id and the sample index only.

    with grpo.Engine("models/demo") as eng:
        groups = eng.rollout([{"id": "q1", "prompt": "What is 2+2?", "answer": "4"}], group=8)
        groups[0].samples[3].text, .token_ids, .logprobs, .finish, .reward, .advantage

No store, no trainer bridge, no weight updates: that is `grpo rollout` (and the run library).
"""
import ctypes
import dataclasses
import json
from typing import Any, Dict, List, Optional, Sequence, Union

from . import _native as n
from ._verifier import Reward, Verifier

MAX_STOP = 16  # GRPO_ROLLOUT_MAX_STOP
FINISH = ("running", "eos", "stop", "length", "abort")  # grpo_rollout_finish
_vp, _cp, _i32, _u64 = ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int32, ctypes.c_uint64


class _PolicyOpts(ctypes.Structure):  # grpo_policy_opts
    _fields_ = [("tokenizer", _cp), ("template_name", _cp), ("n_threads", ctypes.c_int),
                ("kv_budget_bytes", ctypes.c_size_t), ("kv_budget_tokens", ctypes.c_size_t),
                ("backend", ctypes.c_int), ("numerics", ctypes.c_int), ("kv_dtype", ctypes.c_int),
                ("load_mtp", ctypes.c_int)]


NUMERICS = {"exact": 0, "q8": 1, "fp8": 2, "fp8-nondet": 3}  # grpo_numerics
KV_DTYPES = {"f32": 0, "bf16": 1, "fp8": 2}  # grpo_kv_dtype
DEVICES = {"cpu": 0, "cuda": 2}  # grpo_model_opts.backend: 2 = the device-resident CUDA model


class _Prompt(ctypes.Structure):  # grpo_prompt
    _fields_ = [(k, _vp) for k in ("id", "prompt", "messages_json", "answer", "answer_json",
                                   "tests_json", "task", "language", "record_json")] + \
               [("line", ctypes.c_int64)]


class _PromptSet(ctypes.Structure):  # grpo_prompt_set
    _fields_ = [("items", ctypes.POINTER(_Prompt)), ("n", ctypes.c_size_t),
                ("n_skipped", ctypes.c_size_t), ("source", _vp), ("git_commit", _vp),
                ("git_repo", _vp)]


class _Sampling(ctypes.Structure):  # grpo_sampling
    _fields_ = [("temperature", ctypes.c_float), ("top_p", ctypes.c_float), ("top_k", _i32),
                ("min_p", ctypes.c_float)]


class _GenParams(ctypes.Structure):  # grpo_gen_params
    _fields_ = [("sampling", _Sampling), ("max_new_tokens", _i32), ("eos_id", _i32),
                ("n_stop_ids", _i32), ("stop_ids", _i32 * MAX_STOP), ("n_stop_strings", _i32),
                ("stop_strings", _cp * MAX_STOP), ("logprobs", _i32)]


class _Opts(ctypes.Structure):  # grpo_rollout_opts
    _fields_ = [("kv_budget_pages", ctypes.c_size_t), ("max_batch_seqs", _i32),
                ("prefill_chunk", _i32), ("max_step_tokens", _i32), ("no_share_prefix", _i32),
                ("sample_threads", _i32), ("token_bytes", _vp), ("token_bytes_ctx", _vp),
                ("ref", _vp), ("rescore", _vp), ("record_routes", _i32), ("turns", _vp),
                ("speculative", _i32)]


class _Request(ctypes.Structure):  # grpo_rollout_request
    _fields_ = [("prompt", ctypes.POINTER(_i32)), ("n_prompt", _i32), ("group_size", _i32),
                ("sample0", _i32), ("seed", _u64), ("prompt_key", _u64), ("params", _GenParams),
                ("user", _vp)]


class _Sample(ctypes.Structure):  # grpo_rollout_sample
    _fields_ = [("index", _i32), ("finish", ctypes.c_int), ("stop_string", _i32),
                ("n_tokens", _i32), ("tokens", ctypes.POINTER(_i32)),
                ("logprob_raw", ctypes.POINTER(ctypes.c_float)),
                ("logprob_processed", ctypes.POINTER(ctypes.c_float)),
                ("ref_logprob", ctypes.POINTER(ctypes.c_float)),
                ("policy_logprob", ctypes.POINTER(ctypes.c_float)),
                ("text", _vp), ("text_len", ctypes.c_size_t), ("t_done", ctypes.c_double),
                ("routes", _vp), ("mask", ctypes.POINTER(ctypes.c_uint8)), ("n_turns", _i32),
                ("turns", _vp)]


class _Group(ctypes.Structure):  # grpo_rollout_group
    _fields_ = [("id", _u64), ("user", _vp), ("n_prompt", _i32), ("prompt", ctypes.POINTER(_i32)),
                ("req", _Request), ("n_samples", _i32), ("samples", ctypes.POINTER(_Sample)),
                ("t_submit", ctypes.c_double), ("t_admit", ctypes.c_double),
                ("t_done", ctypes.c_double), ("t_first_token", ctypes.c_double),
                ("policy_version", ctypes.c_int64), ("max_abs_logprob_diff", ctypes.c_double),
                ("prompt_routes", _vp), ("route_row_bytes", ctypes.c_size_t)]


class _AdvOpts(ctypes.Structure):  # grpo_adv_opts
    _fields_ = [("kind", ctypes.c_int), ("std_unbiased", _i32), ("batch_std", _i32),
                ("eps", ctypes.c_double), ("whiten_eps", ctypes.c_double), ("single_raw", _i32)]


_SIGS = {
    "grpo_policy_open": (ctypes.c_int, [ctypes.POINTER(_vp), _cp, ctypes.POINTER(_PolicyOpts)]),
    "grpo_policy_close": (None, [_vp]),
    "grpo_policy_backend": (_vp, [_vp]),
    "grpo_policy_eos_id": (_i32, [_vp]),
    "grpo_policy_opens_think": (ctypes.c_int, [_vp]),
    "grpo_policy_template": (_cp, [_vp]),
    "grpo_policy_encode": (ctypes.c_int, [_vp, ctypes.POINTER(_Prompt),
                                          ctypes.POINTER(ctypes.POINTER(_i32)),
                                          ctypes.POINTER(ctypes.c_size_t), ctypes.POINTER(_vp)]),
    "grpo_prompts_parse": (ctypes.c_int, [ctypes.POINTER(_PromptSet), _cp, ctypes.c_size_t, _cp,
                                          ctypes.c_int]),
    "grpo_prompts_fini": (None, [ctypes.POINTER(_PromptSet)]),
    "grpo_sampling_default": (None, [ctypes.POINTER(_Sampling)]),
    "grpo_sampling_check": (ctypes.c_int, [ctypes.POINTER(_Sampling)]),
    "grpo_gen_params_default": (None, [ctypes.POINTER(_GenParams)]),
    "grpo_rollout_prompt_key": (_u64, [_cp]),
    "grpo_rollout_create": (ctypes.c_int, [ctypes.POINTER(_vp), _vp, ctypes.POINTER(_Opts)]),
    "grpo_rollout_destroy": (None, [_vp]),
    "grpo_rollout_submit": (ctypes.c_int, [_vp, ctypes.POINTER(_Request),
                                           ctypes.POINTER(_u64)]),
    "grpo_rollout_run": (ctypes.c_int, [_vp]),
    "grpo_rollout_pop": (ctypes.POINTER(_Group), [_vp, ctypes.c_int]),
    "grpo_rollout_group_free": (None, [ctypes.POINTER(_Group)]),
    "grpo_adv_opts_default": (None, [ctypes.POINTER(_AdvOpts)]),
    "grpo_advantages_masked": (ctypes.c_int, [ctypes.POINTER(_AdvOpts),
                                              ctypes.POINTER(ctypes.c_double), ctypes.c_size_t,
                                              ctypes.POINTER(ctypes.c_int64), ctypes.c_size_t,
                                              ctypes.POINTER(ctypes.c_double),
                                              ctypes.POINTER(ctypes.c_uint8),
                                              ctypes.POINTER(ctypes.c_double),
                                              ctypes.POINTER(ctypes.c_uint8)]),
}
_lib = n.lib
for _name, (_res, _args) in _SIGS.items():
    _f = getattr(_lib, _name)
    _f.restype, _f.argtypes = _res, _args
_libc = ctypes.CDLL(None)
_libc.free.argtypes, _libc.free.restype = [_vp], None


def _check(err: int, what: str) -> None:
    if err != 0:
        raise RuntimeError("grpo.Engine: %s: %s" % (what, n.last_error()))


def _cstr(p: Optional[int]) -> Optional[str]:
    return ctypes.string_at(p).decode("utf-8", "replace") if p else None


@dataclasses.dataclass
class Completion:
    """One sample of a group: its index in the group, the decoded text (invalid UTF-8 replaced;
    text_bytes as generated), the token ids and their raw logprobs (log p under softmax(logits /
    T), what a trainer recomputes), why it finished ("eos", "stop", "length", "abort"), the
    reward (a grpo.Reward with every verifier's verdict) and the group-relative advantage."""
    index: int
    text: str
    text_bytes: bytes
    token_ids: List[int]
    logprobs: List[float]
    finish: str
    reward: Reward
    advantage: float


@dataclasses.dataclass
class Group:
    """The G completions of one prompt: its id, its record (the dict given), the prompt token ids
    and the rendered prompt text (chat template applied)."""
    prompt_id: str
    record: Dict[str, Any]
    prompt_ids: List[int]
    prompt_text: str
    samples: List[Completion]
    zero_variance: bool  # every reward equal: advantages exactly 0


class Engine:
    """A model directory (config.json, safetensors, tokenizer.json) opened for rollouts.

    template: chat template "r1" (default), "v3", "r1-distill", "qwen2.5", "qwen3",
    "qwen3-nothink", "llama3", "llama3.1", "auto" or "none"; tokenizer: another tokenizer.json;
    threads: forward threads (0: all CPUs); kv_budget_tokens / kv_budget_bytes: the KV pool
    (default 1 GiB); reward_config: the reward composition (grpo.Verifier's config; default
    math = 1.0*math + 0.2*format, code = 1.0*code + 0.2*format, format = 1.0*format);
    numerics: "exact" (default: fp32, matches transformers), "q8" (CPU: FP8 weights and the
    lm_head in int8 per 32 columns, activations in int16, integer dot products; faster at every
    batch size, not exact), "fp8" (DeepSeek-V3's FP8 inference numerics: E4M3 activations per
    128 columns at FP8 weights, BF16 at BF16 weights; the CUDA backend's tensor-core GEMMs, whose
    outputs do not depend on the batch, on the CPU their twin; not exact: docs/model.md) or
    "fp8-nondet" (the same roundings through cuBLASLt on CUDA, batch-dependent, not for RL; on
    the CPU the same as "fp8");
    kv_dtype: the KV cache rows, "f32" (default: exact), "bf16" or "fp8" (E4M3 latent with an
    fp32 scale per 128 values, rope key bf16; smaller rows, more sequences in the same budget,
    not exact: docs/model.md)."""

    def __init__(self, model_dir: str, *, template: str = "r1", tokenizer: Optional[str] = None,
                 threads: int = 0, kv_budget_tokens: int = 0, kv_budget_bytes: int = 0,
                 reward_config: Union[None, str, Dict[str, Any]] = None, verify_threads: int = 2,
                 numerics: str = "exact", kv_dtype: str = "f32", device: str = "cpu"):
        if device not in DEVICES:
            raise ValueError(f"device {device!r}: expected one of {sorted(DEVICES)}")
        if numerics not in NUMERICS:
            raise ValueError(f"numerics {numerics!r}: expected one of {sorted(NUMERICS)}")
        if kv_dtype not in KV_DTYPES:
            raise ValueError(f"kv_dtype {kv_dtype!r}: expected one of {sorted(KV_DTYPES)}")
        self._pol = _vp()
        self._verifier = Verifier(reward_config, threads=verify_threads)
        po = _PolicyOpts(tokenizer.encode() if tokenizer else None, template.encode(), threads,
                         kv_budget_bytes, kv_budget_tokens, DEVICES[device], NUMERICS[numerics],
                         KV_DTYPES[kv_dtype])
        _check(_lib.grpo_policy_open(ctypes.byref(self._pol), str(model_dir).encode(),
                                     ctypes.byref(po)), str(model_dir))
        self.template = _lib.grpo_policy_template(self._pol).decode()
        self.opens_think = bool(_lib.grpo_policy_opens_think(self._pol))
        self.eos_id = _lib.grpo_policy_eos_id(self._pol)

    def rollout(self, prompts: Sequence[Union[str, Dict[str, Any]]], *, group: int = 8,
                seed: int = 0, temperature: float = 0.6, top_p: float = 0.95, top_k: int = 0,
                min_p: float = 0.0, max_new_tokens: int = 1024, stop: Sequence[str] = (),
                stop_ids: Sequence[int] = (), max_batch: int = 256,
                sample_threads: int = 0) -> List[Group]:
        """G = group completions of each prompt, in the order of prompts. A prompt is a string
        (one user turn) or a record as `grpo rollout` reads them: {"id", "prompt" | "messages",
        "answer", "tests", "task", "language"}; a record without an id gets its 1-based
        position, as a line of a prompts file does."""
        if not self._pol:
            raise RuntimeError("grpo.Engine: closed")
        recs = [{"prompt": p} if isinstance(p, str) else dict(p) for p in prompts]
        if group < 1 or max_new_tokens < 1 or len(stop) > MAX_STOP or len(stop_ids) > MAX_STOP:
            raise ValueError("grpo.Engine.rollout: group and max_new_tokens must be >= 1, at "
                             "most %d stop strings and %d stop ids" % (MAX_STOP, MAX_STOP))
        params = self._params(temperature, top_p, top_k, min_p, max_new_tokens, stop, stop_ids)
        text = "".join(json.dumps(r) + "\n" for r in recs).encode()
        ps = _PromptSet()
        _check(_lib.grpo_prompts_parse(ctypes.byref(ps), text, len(text), b"prompts", 0),
               "prompts")
        try:
            return self._run(ps, recs, params, group, seed, max_batch, sample_threads)
        finally:
            _lib.grpo_prompts_fini(ctypes.byref(ps))

    def _params(self, temperature, top_p, top_k, min_p, max_new, stop, stop_ids) -> _GenParams:
        p = _GenParams()
        _lib.grpo_gen_params_default(ctypes.byref(p))
        p.sampling = _Sampling(temperature, top_p, top_k, min_p)
        _check(_lib.grpo_sampling_check(ctypes.byref(p.sampling)), "sampling")
        p.max_new_tokens, p.eos_id = max_new, self.eos_id
        p.n_stop_ids = len(stop_ids)
        for k, t in enumerate(stop_ids):
            p.stop_ids[k] = t
        self._stops = [s.encode() for s in stop]  # the engine copies them at submit
        p.n_stop_strings = len(self._stops)
        for k, s in enumerate(self._stops):
            p.stop_strings[k] = s
        return p

    def _run(self, ps, recs, params, group, seed, max_batch, sample_threads) -> List[Group]:
        eng = _vp()
        opts = _Opts(0, max_batch, 0, 0, 0, sample_threads or n.lib.grpo_cpu_count(),
                     ctypes.cast(_lib.grpo_policy_token_bytes, _vp).value, self._pol.value,
                     None, None)
        _check(_lib.grpo_rollout_create(ctypes.byref(eng), _lib.grpo_policy_backend(self._pol),
                                        ctypes.byref(opts)), "engine")
        try:
            prompts = self._submit(eng, ps, params, group, seed)
            _check(_lib.grpo_rollout_run(eng), "rollout")
            done = {}
            while True:
                g = _lib.grpo_rollout_pop(eng, 0)
                if not g:
                    break
                try:
                    done[g.contents.user or 0] = self._samples(g.contents)
                finally:
                    _lib.grpo_rollout_group_free(g)
        finally:
            _lib.grpo_rollout_destroy(eng)
        return [self._score(i, recs[i], prompts[i], done[i], max_new=params.max_new_tokens)
                for i in range(len(recs))]

    def _submit(self, eng, ps, params, group, seed):
        prompts = []
        for i in range(ps.n):
            item = ps.items[i]
            ids, cnt, rendered = ctypes.POINTER(_i32)(), ctypes.c_size_t(), _vp()
            _check(_lib.grpo_policy_encode(self._pol, ctypes.byref(item), ctypes.byref(ids),
                                           ctypes.byref(cnt), ctypes.byref(rendered)),
                   "prompt %d" % (i + 1))
            try:
                pid = _cstr(item.id)
                prompts.append((pid, ids[:cnt.value], _cstr(rendered.value) or "",
                                _cstr(item.record_json)))
                q = _Request(ids, cnt.value, group, 0, seed,
                             _lib.grpo_rollout_prompt_key(pid.encode()), params, i)
                _check(_lib.grpo_rollout_submit(eng, ctypes.byref(q), None), "submit")
            finally:
                _libc.free(ids)
                _libc.free(rendered)
        return prompts

    @staticmethod
    def _samples(g: _Group) -> List[tuple]:
        out = []
        for k in range(g.n_samples):
            s = g.samples[k]
            t = s.n_tokens
            raw = ctypes.string_at(s.text, s.text_len) if s.text else b""
            out.append((s.index, raw, s.tokens[:t], s.logprob_raw[:t],
                        FINISH[s.finish] if 0 <= s.finish < len(FINISH) else str(s.finish)))
        return out

    def _score(self, i, rec, prompt, samples, max_new) -> Group:
        pid, ids, rendered, record_json = prompt
        task = rec.get("task") or "math"
        tests, answer = rec.get("tests"), rec.get("answer")
        batch = [{"task": task, "prompt": rendered, "completion": raw, "answer": answer,
                  "tests": tests, "language": rec.get("language"), "extra": record_json,
                  "prompt_opens_think": self.opens_think, "n_tokens": len(toks),
                  "max_tokens": max_new, "truncated": fin == "length"}
                 for (_, raw, toks, _, fin) in samples]
        rewards = self._verifier.score_batch(batch)
        adv, zero = _advantages([r.reward for r in rewards], [r.skipped for r in rewards])
        return Group(pid, rec, ids, rendered,
                     [Completion(idx, raw.decode("utf-8", "replace"), raw, toks, lps, fin, r, a)
                      for (idx, raw, toks, lps, fin), r, a in zip(samples, rewards, adv)], zero)

    def close(self) -> None:
        if self._pol:
            _lib.grpo_policy_close(self._pol)
            self._pol = _vp()
        self._verifier.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass


def _advantages(rewards: List[float], skipped: Sequence[bool]):
    """GRPO advantages of one group, as `grpo rollout` computes them (grpo_run_advantages:
    grpo_advantages_masked with its defaults): a sample the verifiers skipped gets 0 and is left
    out of the group's mean and std."""
    g = len(rewards)
    o = _AdvOpts()
    _lib.grpo_adv_opts_default(ctypes.byref(o))
    r = (ctypes.c_double * g)(*rewards)
    inc = (ctypes.c_uint8 * g)(*[0 if s else 1 for s in skipped])
    adv = (ctypes.c_double * g)()
    offs = (ctypes.c_int64 * 2)(0, g)
    flags = (ctypes.c_uint8 * 1)()
    _check(_lib.grpo_advantages_masked(ctypes.byref(o), r, g, offs, 1, None, inc, adv, flags),
           "advantages")
    return list(adv), bool(flags[0] & 1)
