"""The reward service: process rewards for RL trainers, served by a worker that keeps the
model loaded and answers many requests with one forward pass.

    web (``api.py``) ──RPUSH request──▶ Redis list ──drain ≤ N──▶ reward worker (``serve.py``)
        ◀──BLPOP its own answer key (the caller's deadline)───────── RPUSH answer

``channel.py`` is the Redis protocol, ``serve.py`` the worker's batching core and loop,
``inputs.py`` what a request's trajectories become; all three are Django-free. The web
side's checks and the optional storing of scored rollouts live in
``scoring/services/rewards.py``; the worker runs as ``manage.py reward_worker``.
"""
