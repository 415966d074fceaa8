"""One module per command, each declaring its ``SPEC`` (:mod:`..spec`), none importing
another (an import-linter contract): what two commands share is in :mod:`..ledger` and
:mod:`..fields`. :mod:`..registry` lists them in the order they are decided.
"""
