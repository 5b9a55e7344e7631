"""Outbound webhooks: endpoints, Standard Webhooks signing, delivery and its address guard."""
