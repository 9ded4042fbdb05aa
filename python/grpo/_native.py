"""ctypes binding of libgrpo (the C library): struct mirrors of include/grpo/verifier.h and
include/grpo/verify.h, and the functions the package calls.

ctypes (not cffi or a CPython extension): it needs neither Python.h (python3-dev) nor a compiler
at import time, one libgrpo.so serves every Python version, and every call through ctypes.CDLL
releases the GIL, so a batch scored on libgrpo's thread pool runs while other Python threads go on.
"""
import ctypes
import os
import pathlib

MAX_TERMS = 8  # GRPO_REWARD_MAX_TERMS
KINDS = ("pass", "fail", "skip", "timeout", "error")  # grpo_verdict_kind 0..4


class Sample(ctypes.Structure):
    """grpo_verifier_sample"""
    _fields_ = [
        ("task", ctypes.c_char_p),
        ("prompt", ctypes.c_char_p),
        ("completion", ctypes.c_char_p),
        ("completion_len", ctypes.c_size_t),
        ("answer", ctypes.c_char_p),
        ("tests_json", ctypes.c_char_p),
        ("language", ctypes.c_char_p),
        ("extra_json", ctypes.c_char_p),
        ("prompt_opens_think", ctypes.c_int32),
        ("n_tokens", ctypes.c_int32),
        ("max_tokens", ctypes.c_int32),
        ("truncated", ctypes.c_int32),
    ]


class Term(ctypes.Structure):
    """grpo_reward_term"""
    _fields_ = [
        ("verifier", ctypes.c_char * 32),
        ("version", ctypes.c_char * 16),
        ("weight", ctypes.c_double),
        ("kind", ctypes.c_int),
        ("label", ctypes.c_char * 32),
        ("score", ctypes.c_double),
        ("ms", ctypes.c_double),
        ("details_json", ctypes.c_char_p),  # read as bytes; freed by grpo_reward_result_fini
    ]


class Result(ctypes.Structure):
    """grpo_reward_result"""
    _fields_ = [
        ("reward", ctypes.c_double),
        ("overlong", ctypes.c_double),
        ("skipped", ctypes.c_int32),
        ("n_terms", ctypes.c_int32),
        ("terms", Term * MAX_TERMS),
        ("ms", ctypes.c_double),
    ]


def _candidates():
    env = os.environ.get("GRPO_LIBRARY")
    if env:
        yield pathlib.Path(env)
        return
    here = pathlib.Path(__file__).resolve().parent
    for name in sorted(here.glob("libgrpo.so*")):
        yield name


def _load():
    tried = []
    for path in _candidates():
        tried.append(str(path))
        if path.exists():
            return ctypes.CDLL(str(path))
    raise ImportError("grpo: libgrpo.so not found (looked at %s); install the package with "
                      "`pip install .` or point GRPO_LIBRARY at build/lib/libgrpo.so"
                      % (", ".join(tried) or "the package directory"))


lib = _load()
_vp, _cp = ctypes.c_void_p, ctypes.c_char_p
_SIGS = {
    "grpo_version": (_cp, []),
    "grpo_error_last": (_cp, []),
    "grpo_cpu_count": (ctypes.c_int, []),
    "grpo_reward_config_parse": (ctypes.c_int,
                                 [ctypes.POINTER(_vp), _cp, ctypes.c_size_t, _cp]),
    "grpo_reward_config_destroy": (None, [_vp]),
    "grpo_rewarder_create": (ctypes.c_int, [ctypes.POINTER(_vp), _vp]),
    "grpo_rewarder_destroy": (None, [_vp]),
    "grpo_rewarder_score": (ctypes.c_int, [_vp, ctypes.POINTER(Sample), ctypes.POINTER(Result)]),
    "grpo_rewarder_score_many": (ctypes.c_int, [_vp, _vp, ctypes.POINTER(Sample), ctypes.c_size_t,
                                                ctypes.POINTER(Result),
                                                ctypes.POINTER(ctypes.c_int)]),
    "grpo_reward_result_fini": (None, [ctypes.POINTER(Result)]),
    "grpo_pool_create": (ctypes.c_int, [ctypes.POINTER(_vp), ctypes.c_int]),
    "grpo_pool_destroy": (None, [_vp]),
    "grpo_pool_size": (ctypes.c_int, [_vp]),
}
for _name, (_res, _args) in _SIGS.items():
    _f = getattr(lib, _name)
    _f.restype, _f.argtypes = _res, _args


def last_error():
    return (lib.grpo_error_last() or b"").decode("utf-8", "replace")
