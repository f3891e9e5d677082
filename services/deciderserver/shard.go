package deciderserver

import (
	"fmt"
	"strings"
	"sync/atomic"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/protoadapt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/state/config"
)

// Model sharding (docs/decisions.md, "Model-sharded deciders"): a replica started with
// -shard NAME reads only that shard's topics (<topic>.<NAME>) and serves Decide only for the
// models the configuration document's shard NAME lists; a replica without -shard serves the
// models no shard lists. Any other model is refused with FAILED_PRECONDITION, ErrorInfo reason
// WRONG_SHARD, naming the owning shard and, when the document lists them, its deciders.

// shardGate decides whether this replica serves a model, from the document in force.
type shardGate struct {
	shard   string
	doc     atomic.Pointer[config.Document]
	refused *prometheus.CounterVec // {owner}; nil until register
}

// register exports sluice_decider_wrong_shard_total on reg (shardRegisterer's).
func (g *shardGate) register(reg prometheus.Registerer) {
	g.refused = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sluice_decider_wrong_shard_total",
		Help: "Decide calls refused with WRONG_SHARD, by the shard that owns the model (owner, empty for the unsharded deciders): callers not yet routing by shard, or a model that moved."},
		[]string{"owner"})
	reg.MustRegister(g.refused)
}

// shardRegisterer is reg with the const label shard=NAME on a sharded replica, so that its
// ingestion and WRONG_SHARD series say which shard they are about; reg itself when unsharded.
func shardRegisterer(reg prometheus.Registerer, shard string) prometheus.Registerer {
	if shard == "" {
		return reg
	}
	return prometheus.WrapRegistererWith(prometheus.Labels{"shard": shard}, reg)
}

// check returns nil when this replica's shard owns model, else a *wrongShardError.
func (g *shardGate) check(model string) error {
	doc := g.doc.Load()
	owner, ok := doc.ShardOf(model)
	if ok && owner.ID == g.shard || !ok && g.shard == "" {
		return nil
	}
	if g.refused != nil {
		g.refused.WithLabelValues(owner.ID).Inc()
	}
	if !ok {
		return &wrongShardError{model: model, replica: g.shard}
	}
	return &wrongShardError{model: model, replica: g.shard, owner: owner.ID, deciders: owner.Deciders}
}

// checkDocument refuses a document that does not define this replica's shard.
func (g *shardGate) checkDocument(doc *config.Document) error {
	if g.shard == "" {
		return nil
	}
	if _, ok := doc.Shard(g.shard); !ok {
		return fmt.Errorf("-shard %s: the configuration defines no shard %q (shards: [%s]); add it under shards or start the decider with another -shard",
			g.shard, g.shard, strings.Join(doc.ShardIDs(), ", "))
	}
	return nil
}

// wrongShardError is a Decide for a model another shard (or, owner empty, the unsharded
// deciders) serves.
type wrongShardError struct {
	model, replica, owner string
	deciders              []string
}

func (e *wrongShardError) Error() string {
	here := "this decider is unsharded"
	if e.replica != "" {
		here = fmt.Sprintf("this decider serves shard %q", e.replica)
	}
	switch {
	case e.owner == "":
		return fmt.Sprintf("model %q belongs to no shard and %s; send it to an unsharded decider (no -shard flag) or list it under a shard", e.model, here)
	case len(e.deciders) == 0:
		return fmt.Sprintf("model %q belongs to shard %q and %s; send it to a decider of shard %q", e.model, e.owner, here, e.owner)
	}
	return fmt.Sprintf("model %q belongs to shard %q and %s; send it to one of %s", e.model, e.owner, here, strings.Join(e.deciders, ", "))
}

func (e *wrongShardError) details() (codes.Code, string, []protoadapt.MessageV1) {
	md := map[string]string{"model": e.model, "shard": e.owner, "replica_shard": e.replica}
	if len(e.deciders) > 0 {
		md["deciders"] = strings.Join(e.deciders, ",")
	}
	return codes.FailedPrecondition, e.Error(), []protoadapt.MessageV1{
		&errdetails.ErrorInfo{Reason: "WRONG_SHARD", Domain: errorDomain, Metadata: md}}
}
