"""vispe's workbench: what exists to measure and check the project itself (the GPU check, the leaderboards, the run
of timm's test suite, the before/after fingerprint, the generated parts of the docs). Run from a checkout; nothing in
``vispe`` imports it."""
