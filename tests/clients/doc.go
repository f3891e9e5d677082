// Package clients tests the Python and TypeScript clients (clients/python, clients/ts) the way
// their users meet them: a real decider process on the real Postgres, the Python package
// installed by pip from its source tree and driven by pytest (native gRPC, sync and asyncio),
// the TypeScript package (its committed dist/, as `npm install ./clients/ts` gets it) driven by
// node's test runner over Connect, gRPC-Web and native gRPC.
//
// The suites read the decider's addresses and tokens from the environment this package sets
// (SLUICE_CLIENTS_* below). scripts/test.sh installs their tools (scripts/lib/clients.sh): the
// Python venv, whose interpreter it passes as SLUICE_TEST_CLIENTS_PYTHON, and clients/ts's
// node_modules.
package clients
