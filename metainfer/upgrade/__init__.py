"""``metainfer upgrade``: carry a generated engine and its branch's accepted iterations to a changed model.

Modules: ``facts_diff`` (classify what changed), ``plan`` (old and new targets), ``replay``
(one old iteration on the new branch), ``run`` (the whole upgrade, resumable), ``report``
(md/json/html), ``reweigh`` (same architecture, new weights), ``lineage`` (``render --check``).
"""
