"""nova-imgtype's gate: a real cloud on one machine, judged by tempest."""
