#!/usr/bin/env bash
# Installs the official MCP Inspector (@modelcontextprotocol/inspector, from the npm registry) into
# tools/mcp-inspector (git-ignored): its CLI mode is the MCP client no one here wrote that
# tests/api/mcp_inspector.rs drives against memex. Idempotent: nothing to do when the pinned
# version is already there. Without Node it installs nothing, and that test says it was skipped.
set -euo pipefail
cd "$(dirname "$0")/.."
VERSION=2.12.0
DIR=tools/mcp-inspector
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
  echo "install-mcp-inspector: no node/npm here; the MCP Inspector test will be skipped" >&2
  exit 0
fi
installed=$(node -p "require('./$DIR/node_modules/@modelcontextprotocol/inspector/package.json').version" 2>/dev/null || true)
if [ "$installed" = "$VERSION" ] && [ -x "$DIR/node_modules/.bin/mcp-inspector" ]; then
  exit 0
fi
mkdir -p "$DIR"
[ -f "$DIR/package.json" ] || echo '{ "private": true }' >"$DIR/package.json"
# Its declared engine is Node >= 22; the CLI mode used here runs on the distribution's Node 20 too.
npm install --prefix "$DIR" --no-audit --no-fund --loglevel=error --engine-strict=false \
  "@modelcontextprotocol/inspector@$VERSION"
echo "install-mcp-inspector: @modelcontextprotocol/inspector@$VERSION in $DIR" >&2
