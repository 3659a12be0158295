"""LLM judges, Django-free: a generative model reads a trajectory and writes a verdict with
a critique. ``config`` holds the judge's parameters and prompt templates, ``modes`` turns
trajectories into judge requests and verdicts into step values, ``verdicts`` parses the
replies; ``local`` generates with transformers, ``remote`` asks an OpenAI-compatible
``chat/completions`` endpoint; ``scorer`` is a judge as a step scorer, storing nothing
(the reward worker's).

Importing this package, ``config``, ``modes``, ``verdicts``, ``remote`` and ``scorer``
loads neither torch nor Django; ``local`` loads torch and transformers.
"""
