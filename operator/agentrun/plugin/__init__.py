"""``kubectl agentrun``: a person's view of runs and slots, and their commands.

:mod:`.requests` builds command annotations and reads their outcomes, :mod:`.views`
renders status trees and histories (both pure); :mod:`.client` talks to the API server
through :mod:`agentrun.kube.rest`; :mod:`.cli` is the command line.
"""
