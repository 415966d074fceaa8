"""The cluster a test runs against: the local control plane and node, their processes and host
side, the images and Helm built without a registry, the audit log."""
