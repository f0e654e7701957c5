"""From a model and a host to a checked deployment plan: model facts, engine versions, the plan's
rules, fit, --like."""


class PlanError(Exception):
    """Bad input for a plan: one line, exit code 2, nothing written."""
