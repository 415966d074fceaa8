"""A slot's next step: one pure function over everything the operator read for it.

The *world* (:mod:`.inputs`) is the snapshot a decision is made in; :mod:`.steps` chooses
the next write (an *action*, :mod:`.actions`) from it, delegating to the steps of a pending
command (:mod:`.commandsteps`), of an attempt's life (:mod:`.attemptlife`: claiming,
judging, fencing; :mod:`.attemptpods`: whose pod and renewals count;
:mod:`.refusedclaims`), of unresolved effects (:mod:`.effectsteps`), of a pinned
LaunchSpec's snapshot (:mod:`.specsnapshots`) and of names someone else took
(:mod:`.squats`). :mod:`.tallies` reads what an applied status write counts for in the
metrics. Imports every package below it; nothing above (runs) is imported here.
"""
