"""SGLang, gpuops' first engine. Its adapter is ``engine.SGLang``, imported the first time a plan
names it (this module says only its name: ``core/engines/__init__.py`` reads it)."""

from .keys import PLAN_KEYS as PLAN_KEYS

NAME = "sglang"
ADAPTER = "engine:SGLang"
# a plan that names no engine is SGLang's (every plan made before engines had names), and the plan's
# fields keep the JSON and store keys SGLang gave them (keys.py)
DEFAULT = True
