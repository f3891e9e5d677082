// Package enginelink connects real inference engines (vLLM, SGLang) to sluice: it subscribes to
// their ZMQ KV-cache event publishers and forwards every payload unchanged to the KV-event topic
// with epoch/seq headers, filling seq gaps through the engines' replay sockets, and it scrapes their
// Prometheus /metrics (or SGLang's /v1/loads) into sluice.v1.LoadReport records on the load topic.
//
// # Topologies
//
// An engine whose publisher binds (endpoint "tcp://*:port", ipc, inproc) is reached by dialing its
// kv_events_endpoint: the link opens one SUB socket per DP rank (tcp port + rank; ipc/inproc
// "_dp<rank>" suffix for ranks above 0). An engine whose publisher connects (endpoint
// "tcp://host:port") connects to the socket the link binds with -kv-bind; such engines set their
// ZMQ topic to
//
//	kv@<engine id>@<model>
//
// which is how the link tells them apart. Messages with any other topic are counted
// (sluice_enginelink_kv_unknown_topic_total) and logged at most once per 30 s. On the bound socket
// the DP rank is read from the batch (third array element or the "data_parallel_rank" key), else it
// is the port offset of the socket that received it (-kv-bind-ports binds base..base+n-1).
//
// # Record contract
//
// Each KV record: key = engine id, value = the engine's msgpack payload frame unchanged, headers
// sluice-format (vllm.msgpack or sglang.msgpack), sluice-epoch, sluice-seq (the engine's ZMQ seq,
// 0-based, unchanged), sluice-model, sluice-dp-rank, and sluice-lora / sluice-cache-salt when
// configured. The epoch is minted per engine by the link (wall-clock nanoseconds, strictly
// increasing within the process) when it starts following the engine and anew whenever the
// engine restarted: its seq went backwards, or its replay buffer holds another payload under
// the last forwarded seq (checked at every reconnect and gap). Load reports of an engine carry the same epoch
// and their own seq from 1 per (engine, rank, epoch).
package enginelink
