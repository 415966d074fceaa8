"""The admission policies the operator ships, built from the commands (one source).

The ValidatingAdmissionPolicies that reject bad writes synchronously (:mod:`.validating`),
the MutatingAdmissionPolicy that stamps a command's actor (:mod:`.admission`) and whether a
stamped actor can be believed (:mod:`.stamping`: epochs), the policies on attempt Leases
(:mod:`.leasepolicy`: only the holder renews) and on pod-bound tokens
(:mod:`.tokenpolicy`). Imports the commands whose shapes it turns into CEL.
"""
