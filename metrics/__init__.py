"""Stepscope's maths on plain arrays, with no Django and no app imported: one
implementation of each metric, for every app above to use.

- :mod:`metrics.arrays`: flat per-step arrays with CSR ``offsets`` (trajectory *i* owns
  ``values[offsets[i]:offsets[i + 1]]``), the layout every function here takes.
- :mod:`metrics.agreement`: confusion, kappa, accuracy, bad-step detection, AUROC,
  calibration, ProcessBench first-error metrics, and agreement among annotators
  (percent agreement, pairwise kappa, Krippendorff's alpha).
- :mod:`metrics.decisive`: agreement on decisive failures (which agent, at which step,
  decided a failed run): agent and decisive-step accuracy with bootstrap intervals.
- :mod:`metrics.montecarlo`: Monte Carlo values of a task's prefix tree, with
  Beta-binomial smoothing.
"""
