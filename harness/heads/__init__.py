"""The head file a trained probe writes beside its record: its format, identity, bytes, and reading one back.

Below `runs` (whose probe runs write and score heads) and above `probes`; users load a head with
`harness.load_probe` (`harness.api`) and publish one with `visbench-harness publish` (`harness.user.publish`).
"""
