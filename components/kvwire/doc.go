// Package kvwire reads the records of the KV-event topic (sluice.kv-events.v1)
// into state/kvevents' domain events. Every wire format sluice accepts for KV
// events lives here, side by side:
//
//   - record.go: the Kafka record framing: the sluice-* headers, the record
//     key (the engine id) and the format selection (Record, DecodeRecord, and
//     Decoder, which reuses its buffers from record to record).
//   - proto.go: sluice's own protobuf, sluice.v1.KvEventBatch
//     (proto/sluice/v1/records.proto).
//   - msgpack_batch.go, msgpack_fields.go, msgpack_namespace.go,
//     msgpack_reader.go: the engines' own msgpack batches, vLLM and SGLang in
//     every layout of docs/wire-formats.md (the batch framing; one event's field
//     schema; vLLM extra keys turned into a namespace; the msgpack reader). A
//     well-formed event is decoded in one pass; any other is decoded again
//     after a pass that checks it (decodeState.checked), so that a malformed
//     event fails its batch and an invalid one is skipped.
//   - engineenc (a subpackage): the engines' msgpack batches written the way
//     vLLM and SGLang write them; the simulated engine publishes with it and
//     the decoders' tests and benchmarks read its bytes.
//
// The rules an event must follow once decoded (block counts, token counts,
// SGLang short last pages, sparse KV-cache groups, extra keys) and their limits
// belong to state/kvevents, so that both formats give an event the same
// verdict. docs/kv-events.md describes the rules and the layers around them.
package kvwire
