"""Drop-in replacements for other packages' APIs: `from grpo.compat import math_verify`."""
