"""One way to run a background job, for every kind (imports, exports, scoring runs,
attribution runs, rollout jobs).

- :mod:`stepscope.jobs.models`: the abstract model bases: a job's states, who started it
  and when, its error; progress counts with the percent, rate and ETA the rows show;
  chunk counts; and the chunk a Celery task works through.
- :mod:`stepscope.jobs.retry`: the redelivery and retry policy every job task carries.
- :mod:`stepscope.jobs.lifecycle`: claiming a chunk, failing, cancelling a job.
- :mod:`stepscope.jobs.active`: the active jobs of every kind, for the status page.

The one cache of loaded models a GPU worker holds is :mod:`scoring.prm.cache`: the
Django-free adapters and generators fill it, and this package loads Django.
"""
