"""SGLang's programs sent to hosts (as ``core/hosts/programs/``: standard library only, Python 3.6
grammar, sent with ``script_source``): ``version.py``, the install check and the planner's question."""
