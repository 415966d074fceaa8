"""``kubectl agentrun``: a person's view of runs and slots, and their commands.

:mod:`.requests` builds command annotations and reads their outcomes, :mod:`.views` and
:mod:`.lists` render status trees, histories and run tables (all pure); :mod:`.client`
talks to the API server through :mod:`agentrun.rest`, with the configuration
:mod:`.kubeconfigs` finds as kubectl does; :mod:`.watching` follows changes (``-w``);
:mod:`.output` prints text, JSON or YAML; :mod:`.cli` is the command line (its flags in
:mod:`.flags`, its reads in :mod:`.shows`), :mod:`.completion` its shell completion
(``kubectl_complete-agentrun``), and ``krew/agentrun.yaml`` its krew manifest.
"""
