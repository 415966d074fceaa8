"""A value within its bound for every field a command takes (admission and the operator
would both accept it): the one sample the registry's and the plugin's tests share. A field
no command took before needs its sample here."""

from __future__ import annotations

SAMPLES = {"reason": "why", "worker_class": "cpu", "run": "study", "tenant": "team-a",
           "effect_key": "publish", "outcome": "applied", "result": "{}",
           "question_key": "approve-plan", "value": '{"approved": true}', "digest": "0" * 64,
           "approval_key": "publish", "payload_digest": "a" * 64,
           "value_from": "agentrun-answer-1/value@sha256:" + "b" * 64, "from_step": "outline",
           "resend": "publish", "resend_reason": "the blog lost the post"}
