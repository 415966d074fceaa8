"""Launch specs: which LaunchSpec starts a slot's next worker, pinned exactly, and its status.

Selection (:mod:`.selection`) chooses among the LaunchSpecs listing a worker class; a pin
(:mod:`.launchpins`) records the choice with the digest of its spec; a LaunchSpec's own
status (:mod:`.launchspecstatus`) says whether its pod template is valid and which slots
pin it. Imports the attempts' builders (to build the Pod a claim would create) and the
base.
"""
