"""Developer tools, kept out of the product: the benchmark harness (`manage.py bench`), the chaos
run (`manage.py chaos`), the fake OpenAI-compatible server, a real MCP server with tools of each
kind (`mcp_server`), private redis-servers and child processes. Installed by `devtools.settings`
and the test settings, never by the production settings, and left out of the package that
pyproject.toml builds."""
