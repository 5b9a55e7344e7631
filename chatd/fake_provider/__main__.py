"""`python -m chatd.fake_provider`: serve the fake provider (with the demo model)."""

from chatd.fake_provider.server import main

main()
