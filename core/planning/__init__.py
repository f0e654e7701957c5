"""From a model and a host to a checked deployment plan: model facts, SGLang versions, the plan's rules, fit, --like."""
