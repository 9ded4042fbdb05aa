"""The trainer-bridge client (trainer_bridge/python/grpo_bridge): pull GRPO batches over NNG,
acknowledge them, publish weights. Needs numpy, safetensors and pynng. Everything grpo_bridge
exports is here; grpo_bridge stays importable under its own name."""
from grpo_bridge import *  # noqa: F401,F403
from grpo_bridge import __all__  # noqa: F401
