"""vispe's workbench: what exists to measure and check the project itself (the GPU check, the leaderboards and the
model zoo they export, the run of timm's test suite, the speed targets, the before/after fingerprint, the generated
parts of the docs). Run from a checkout's root (``python -m workbench.<name>``, or the scripts in tools/); nothing in
``vispe`` imports it."""
