"""``orders-smoke``: a post-deployment check that submits a few orders and follows them to Processed.

It talks to the HTTP API only (httpx and pydantic, both in requirements.txt), so it runs against a
deployed Function App as well as the local stack. Kept out of the deployment package by ``.funcignore``.
"""
