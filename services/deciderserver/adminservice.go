package deciderserver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	sluicev1 "github.com/sluicehq/sluice/gen/sluice/v1"
	"github.com/sluicehq/sluice/state/config"
	"github.com/sluicehq/sluice/state/inflight"
	"github.com/sluicehq/sluice/state/loadtable"
	"github.com/sluicehq/sluice/state/registry"
)

// DrainedLabel marks an engine taken out of its groups by DrainEngine; the registry stops
// offering it as a candidate.
const DrainedLabel = registry.DrainedLabel

var _ sluicev1.AdminServiceServer = (*adminService)(nil)

// adminService is sluice.v1.AdminService, the one implementation every protocol reaches: engines with health and load from this replica's tables,
// and the configuration through the config store. Every write reads the document of the version
// it is based on, changes a copy, and hands the whole document to the store, which validates it,
// checks the base version and stores it atomically.
type adminService struct {
	sluicev1.UnimplementedAdminServiceServer
	reg    *registry.Registry
	load   *loadtable.Table
	leases *inflight.Tracker
	store  config.Store
	// check refuses a document this replica could not serve (e.g. cache_aware without a KV
	// index) before it is stored, so a write never leaves replicas refusing the new version.
	check func(*config.Document) error
	// served blocks until this replica serves version (or a later one), bounded, so a caller
	// reads its own write: the store publishes a write to the replica asynchronously.
	served func(ctx context.Context, version int64)
}

// written waits until the replica serves snap before a write's answer goes out.
func (a *adminService) written(ctx context.Context, snap config.Snapshot) {
	if a.served != nil {
		a.served(ctx, snap.Version)
	}
}

// serviceable runs check and reports a refusal as a validation problem of the whole document.
func (a *adminService) serviceable(doc *config.Document) error {
	if a.check == nil {
		return nil
	}
	err := a.check(doc)
	if err == nil {
		return nil
	}
	var ve *config.ValidationError
	if errors.As(err, &ve) {
		return ve
	}
	return &config.ValidationError{Problems: []config.Problem{{Message: "this decider cannot serve the configuration: " + err.Error()}}}
}

func (a *adminService) ListEngines(_ context.Context, in *sluicev1.ListEnginesRequest) (*sluicev1.ListEnginesResponse, error) {
	reg := a.reg.Snapshot()
	snap := a.load.Snapshot()
	out := &sluicev1.ListEnginesResponse{}
	for _, w := range reg.Engines() {
		if m := in.GetModel(); m != "" && !slices.Contains(w.Models, m) {
			continue
		}
		h, _ := reg.Health(w.ID)
		e := &sluicev1.Engine{Id: w.ID, Url: w.URL, Models: slices.Clone(w.Models), Role: roleToProto(w.Role),
			BootstrapPort: w.BootstrapPort, Labels: w.Labels, Healthy: h.Healthy, HealthReason: h.Reason,
			KvEventsEndpoint: w.KVEventsEndpoint, KvReplayEndpoint: w.KVReplayEndpoint, MetricsUrl: w.MetricsURL,
			DpSize: w.DPSize, LoraAdapters: slices.Clone(w.LoRAAdapters),
			Load: &sluicev1.EngineLoad{Inflight: a.leases.InFlight(w.Slot)}}
		if v, ok := snap.View(w.Slot); ok {
			e.Load.LoadKnown = true
			e.Load.Running, e.Load.Waiting = v.Running, v.Waiting
			e.Load.KvUsed, e.Load.KvCapacity = v.KVUsedTokens, v.KVCapacityTokens
			e.Load.CapturedAt = timestamppb.New(v.CapturedAt)
		}
		out.Engines = append(out.Engines, e)
	}
	return out, nil
}

func (a *adminService) GetEngine(ctx context.Context, in *sluicev1.GetEngineRequest) (*sluicev1.GetEngineResponse, error) {
	all, err := a.ListEngines(ctx, &sluicev1.ListEnginesRequest{})
	if err != nil {
		return nil, err
	}
	for _, e := range all.GetEngines() {
		if e.GetId() == in.GetId() {
			return &sluicev1.GetEngineResponse{Engine: e}, nil
		}
	}
	return nil, notFound("ENGINE_NOT_FOUND", "engine %q is not registered", in.GetId())
}

func (a *adminService) GetConfig(context.Context, *sluicev1.GetConfigRequest) (*sluicev1.GetConfigResponse, error) {
	snap := a.store.Current()
	doc, err := json.Marshal(snap.Document)
	if err != nil {
		return nil, err
	}
	return &sluicev1.GetConfigResponse{Version: snap.Version, DocumentJson: string(doc),
		LoadedAt: timestamppb.New(snap.LoadedAt), Source: snap.Source}, nil
}

// base returns the document of version basedOn (0: the current one) and that version.
func (a *adminService) base(ctx context.Context, basedOn int64) (*config.Document, int64, error) {
	cur := a.store.Current()
	if basedOn == 0 || basedOn == cur.Version {
		return cur.Document, cur.Version, nil
	}
	if basedOn < cur.Version {
		// This replica already serves a newer version, so the store's head is newer still.
		return nil, 0, &config.ConflictError{Current: cur.Version}
	}
	// This replica lags the caller: edit the version the caller saw, the store checks it is the head.
	rev, err := a.store.Version(ctx, basedOn)
	if errors.Is(err, config.ErrVersionNotFound) {
		return nil, 0, &config.ConflictError{Current: cur.Version}
	}
	if err != nil {
		return nil, 0, err
	}
	return rev.Document, basedOn, nil
}

// change applies edit to a copy of the base document and stores the result.
func (a *adminService) change(ctx context.Context, basedOn int64, edit func(*config.Document) error) (config.Snapshot, string, error) {
	doc, version, err := a.base(ctx, basedOn)
	if err != nil {
		return config.Snapshot{}, "", err
	}
	next := doc.Clone()
	if err := edit(next); err != nil {
		return config.Snapshot{}, "", err
	}
	if err := next.Validate(); err != nil {
		return config.Snapshot{}, "", err
	}
	if err := a.serviceable(next); err != nil {
		return config.Snapshot{}, "", err
	}
	snap, err := a.store.Apply(config.WithAuthor(ctx, author(ctx)), next, version)
	if err != nil {
		return config.Snapshot{}, "", err
	}
	a.written(ctx, snap)
	return snap, config.Summarize(doc, snap.Document), nil
}

// ApplyConfig replaces the whole document. An empty one (no body, {}, document "", a
// misspelled field name that left document unset, a file of comments) is refused naming the
// field: it would otherwise replace every bucket and engine with nothing.
func (a *adminService) ApplyConfig(ctx context.Context, in *sluicev1.ApplyConfigRequest) (*sluicev1.ApplyConfigResponse, error) {
	doc, err := config.Parse([]byte(in.GetDocument()), config.FormatAuto)
	if err != nil {
		return nil, err
	}
	if doc.IsEmpty() {
		return nil, config.EmptyDocumentError("document")
	}
	prev, version, err := a.base(ctx, in.GetBasedOnVersion())
	if err != nil {
		return nil, err
	}
	if err := a.serviceable(doc); err != nil {
		return nil, err
	}
	if in.GetValidateOnly() {
		return &sluicev1.ApplyConfigResponse{Version: version, Summary: config.Summarize(prev, doc)}, nil
	}
	snap, err := a.store.Apply(config.WithAuthor(ctx, author(ctx)), doc, version)
	if err != nil {
		return nil, err
	}
	a.written(ctx, snap)
	return &sluicev1.ApplyConfigResponse{Version: snap.Version, Applied: true, Summary: config.Summarize(prev, snap.Document)}, nil
}

func versionToProto(v config.VersionInfo) *sluicev1.ConfigVersion {
	return &sluicev1.ConfigVersion{Version: v.Version, Author: v.Author, CreatedAt: timestamppb.New(v.CreatedAt),
		Summary: v.Summary, RollbackOf: v.RollbackOf}
}

func (a *adminService) ListVersions(ctx context.Context, in *sluicev1.ListVersionsRequest) (*sluicev1.ListVersionsResponse, error) {
	vs, err := a.store.Versions(ctx, int(in.GetLimit()))
	if err != nil {
		return nil, err
	}
	out := &sluicev1.ListVersionsResponse{CurrentVersion: a.store.Current().Version}
	for _, v := range vs {
		out.Versions = append(out.Versions, versionToProto(v))
	}
	return out, nil
}

func (a *adminService) GetVersion(ctx context.Context, in *sluicev1.GetVersionRequest) (*sluicev1.GetVersionResponse, error) {
	rev, err := a.store.Version(ctx, in.GetVersion())
	if err != nil {
		return nil, err
	}
	doc, err := json.Marshal(rev.Document)
	if err != nil {
		return nil, err
	}
	return &sluicev1.GetVersionResponse{Info: versionToProto(rev.VersionInfo), DocumentJson: string(doc)}, nil
}

func (a *adminService) Rollback(ctx context.Context, in *sluicev1.RollbackRequest) (*sluicev1.RollbackResponse, error) {
	basedOn := in.GetBasedOnVersion()
	if basedOn == 0 {
		basedOn = a.store.Current().Version
	}
	snap, err := a.store.Rollback(config.WithAuthor(ctx, author(ctx)), in.GetVersion(), basedOn)
	if err != nil {
		return nil, err
	}
	a.written(ctx, snap)
	return &sluicev1.RollbackResponse{Version: snap.Version, Summary: fmt.Sprintf("rolled back to version %d", in.GetVersion())}, nil
}

// Buckets travel as google.protobuf.Struct in the document's own shape, so REST bodies look
// exactly like the YAML/JSON configuration and Parse reports problems with their paths.

func bucketToStruct(b config.BucketSpec) (*structpb.Struct, error) {
	raw, err := json.Marshal(b)
	if err != nil {
		return nil, err
	}
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, err
	}
	return structpb.NewStruct(m)
}

// bucketFromStruct parses one bucket with the document parser; problem paths start "bucket".
func bucketFromStruct(s *structpb.Struct) (config.BucketSpec, error) {
	if s == nil {
		return config.BucketSpec{}, invalidArgument("BUCKET_MISSING", "bucket is missing")
	}
	raw, err := json.Marshal(map[string]any{"buckets": []any{s.AsMap()}})
	if err != nil {
		return config.BucketSpec{}, err
	}
	doc, err := config.Parse(raw, config.FormatJSON)
	var ve *config.ValidationError
	if errors.As(err, &ve) {
		for i, p := range ve.Problems {
			if rest, ok := strings.CutPrefix(p.Path, "buckets[0]"); ok {
				ve.Problems[i].Path = "bucket" + rest
			}
		}
		return config.BucketSpec{}, ve
	}
	if err != nil {
		return config.BucketSpec{}, err
	}
	return doc.Buckets[0], nil
}

func (a *adminService) ListBuckets(context.Context, *sluicev1.ListBucketsRequest) (*sluicev1.ListBucketsResponse, error) {
	snap := a.store.Current()
	out := &sluicev1.ListBucketsResponse{Version: snap.Version}
	for _, b := range snap.Document.EffectiveBuckets() {
		s, err := bucketToStruct(b)
		if err != nil {
			return nil, err
		}
		out.Buckets = append(out.Buckets, s)
	}
	return out, nil
}

func (a *adminService) GetBucket(_ context.Context, in *sluicev1.GetBucketRequest) (*sluicev1.GetBucketResponse, error) {
	snap := a.store.Current()
	for _, b := range snap.Document.EffectiveBuckets() {
		if b.ID == in.GetId() {
			s, err := bucketToStruct(b)
			if err != nil {
				return nil, err
			}
			return &sluicev1.GetBucketResponse{Version: snap.Version, Bucket: s}, nil
		}
	}
	return nil, notFound("BUCKET_NOT_FOUND", "bucket %q does not exist", in.GetId())
}

func bucketIndex(doc *config.Document, id string) int {
	return slices.IndexFunc(doc.EffectiveBuckets(), func(b config.BucketSpec) bool { return b.ID == id })
}

// ownBuckets makes the document's bucket list explicit (nil means the defaults).
func ownBuckets(doc *config.Document) {
	if doc.Buckets == nil {
		doc.Buckets = config.DefaultBuckets()
	}
}

func (a *adminService) CreateBucket(ctx context.Context, in *sluicev1.CreateBucketRequest) (*sluicev1.CreateBucketResponse, error) {
	b, err := bucketFromStruct(in.GetBucket())
	if err != nil {
		return nil, err
	}
	snap, summary, err := a.change(ctx, in.GetBasedOnVersion(), func(doc *config.Document) error {
		if bucketIndex(doc, b.ID) >= 0 {
			return &requestError{code: codes.AlreadyExists, reason: "BUCKET_EXISTS", message: fmt.Sprintf("bucket %q already exists; replace it instead", b.ID)}
		}
		ownBuckets(doc)
		doc.Buckets = append(doc.Buckets, b)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return &sluicev1.CreateBucketResponse{Version: snap.Version, Summary: summary}, nil
}

func (a *adminService) ReplaceBucket(ctx context.Context, in *sluicev1.ReplaceBucketRequest) (*sluicev1.ReplaceBucketResponse, error) {
	st := in.GetBucket()
	if st != nil {
		if _, ok := st.GetFields()["id"]; !ok {
			// An empty bucket off the wire has no field map at all.
			fields := make(map[string]*structpb.Value, len(st.GetFields())+1)
			maps.Copy(fields, st.GetFields())
			fields["id"] = structpb.NewStringValue(in.GetId())
			st = &structpb.Struct{Fields: fields}
		}
	}
	b, err := bucketFromStruct(st)
	if err != nil {
		return nil, err
	}
	if b.ID != in.GetId() {
		return nil, invalidArgument("BUCKET_ID_MISMATCH", "bucket.id %q differs from the id %q in the request; buckets cannot be renamed, delete and create instead", b.ID, in.GetId())
	}
	snap, summary, err := a.change(ctx, in.GetBasedOnVersion(), func(doc *config.Document) error {
		i := bucketIndex(doc, b.ID)
		if i < 0 {
			return notFound("BUCKET_NOT_FOUND", "bucket %q does not exist; create it instead", b.ID)
		}
		ownBuckets(doc)
		doc.Buckets[i] = b
		return nil
	})
	if err != nil {
		return nil, err
	}
	return &sluicev1.ReplaceBucketResponse{Version: snap.Version, Summary: summary}, nil
}

func (a *adminService) DeleteBucket(ctx context.Context, in *sluicev1.DeleteBucketRequest) (*sluicev1.DeleteBucketResponse, error) {
	snap, summary, err := a.change(ctx, in.GetBasedOnVersion(), func(doc *config.Document) error {
		i := bucketIndex(doc, in.GetId())
		if i < 0 {
			return notFound("BUCKET_NOT_FOUND", "bucket %q does not exist", in.GetId())
		}
		ownBuckets(doc)
		doc.Buckets = slices.Delete(doc.Buckets, i, i+1)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return &sluicev1.DeleteBucketResponse{Version: snap.Version, Summary: summary}, nil
}

func roleFromProto(r sluicev1.Role) string {
	switch r {
	case sluicev1.Role_ROLE_PLAIN:
		return config.RolePlain
	case sluicev1.Role_ROLE_PREFILL:
		return config.RolePrefill
	case sluicev1.Role_ROLE_DECODE:
		return config.RoleDecode
	}
	return ""
}

func engineFromProto(e *sluicev1.EngineSpec) (config.EngineSpec, error) {
	if e == nil {
		return config.EngineSpec{}, invalidArgument("ENGINE_MISSING", "engine is missing")
	}
	w := config.EngineSpec{ID: e.GetId(), URL: e.GetUrl(), Models: slices.Clone(e.GetModels()), Role: roleFromProto(e.GetRole()),
		BootstrapPort: e.GetBootstrapPort(), Labels: maps.Clone(e.GetLabels()),
		KVEventsEndpoint: e.GetKvEventsEndpoint(), KVReplayEndpoint: e.GetKvReplayEndpoint(), MetricsURL: e.GetMetricsUrl(),
		DPSize: e.GetDpSize(), LoRAAdapters: slices.Clone(e.GetLoraAdapters())}
	if w.Role == "" {
		return w, &config.ValidationError{Problems: []config.Problem{{Path: "engine.role", Message: "role is unset; use ROLE_PLAIN, ROLE_PREFILL or ROLE_DECODE"}}}
	}
	// Check the engine on its own first, so problems name engine.id (not workers[7].id).
	var ve *config.ValidationError
	if err := (&config.Document{Engines: []config.EngineSpec{w}}).Validate(); errors.As(err, &ve) {
		for i, p := range ve.Problems {
			if rest, ok := strings.CutPrefix(p.Path, "workers[0]"); ok {
				ve.Problems[i].Path = "engine" + rest
			}
		}
		return w, ve
	}
	return w, nil
}

func engineIndex(doc *config.Document, id string) int {
	return slices.IndexFunc(doc.Engines, func(w config.EngineSpec) bool { return w.ID == id })
}

// dropFromGroups removes id from every explicit group membership.
func dropFromGroups(doc *config.Document, id string) {
	for i := range doc.Buckets {
		g := doc.Buckets[i].Groups
		for _, gs := range []*config.GroupSpec{g.Plain, pdGroup(g.PD, true), pdGroup(g.PD, false)} {
			if gs != nil && gs.EngineIDs != nil {
				ids := slices.DeleteFunc(slices.Clone(*gs.EngineIDs), func(w string) bool { return w == id })
				gs.EngineIDs = &ids
			}
		}
	}
}

func pdGroup(pd *config.PDSpec, prefill bool) *config.GroupSpec {
	if pd == nil {
		return nil
	}
	if prefill {
		return pd.Prefill
	}
	return pd.Decode
}

func (a *adminService) RegisterEngine(ctx context.Context, in *sluicev1.RegisterEngineRequest) (*sluicev1.RegisterEngineResponse, error) {
	w, err := engineFromProto(in.GetEngine())
	if err != nil {
		return nil, err
	}
	snap, summary, err := a.change(ctx, in.GetBasedOnVersion(), func(doc *config.Document) error {
		if engineIndex(doc, w.ID) >= 0 {
			return &requestError{code: codes.AlreadyExists, reason: "ENGINE_EXISTS", message: fmt.Sprintf("engine %q already exists; update it instead", w.ID)}
		}
		doc.Engines = append(doc.Engines, w)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return &sluicev1.RegisterEngineResponse{Version: snap.Version, Summary: summary}, nil
}

func (a *adminService) UpdateEngine(ctx context.Context, in *sluicev1.UpdateEngineRequest) (*sluicev1.UpdateEngineResponse, error) {
	spec := in.GetEngine()
	if spec != nil && spec.GetId() == "" {
		spec.Id = in.GetId()
	}
	w, err := engineFromProto(spec)
	if err != nil {
		return nil, err
	}
	if w.ID != in.GetId() {
		return nil, invalidArgument("ENGINE_ID_MISMATCH", "engine.id %q differs from the id %q in the request", w.ID, in.GetId())
	}
	snap, summary, err := a.change(ctx, in.GetBasedOnVersion(), func(doc *config.Document) error {
		i := engineIndex(doc, w.ID)
		if i < 0 {
			return notFound("ENGINE_NOT_FOUND", "engine %q is not in the configuration's worker list; register it instead", w.ID)
		}
		doc.Engines[i] = w
		return nil
	})
	if err != nil {
		return nil, err
	}
	return &sluicev1.UpdateEngineResponse{Version: snap.Version, Summary: summary}, nil
}

func (a *adminService) DrainEngine(ctx context.Context, in *sluicev1.DrainEngineRequest) (*sluicev1.DrainEngineResponse, error) {
	snap, summary, err := a.change(ctx, in.GetBasedOnVersion(), func(doc *config.Document) error {
		i := engineIndex(doc, in.GetId())
		if i < 0 {
			return notFound("ENGINE_NOT_FOUND", "engine %q is not in the configuration's worker list", in.GetId())
		}
		if doc.Engines[i].Labels == nil {
			doc.Engines[i].Labels = map[string]string{}
		}
		doc.Engines[i].Labels[DrainedLabel] = "true"
		dropFromGroups(doc, in.GetId())
		return nil
	})
	if err != nil {
		return nil, err
	}
	return &sluicev1.DrainEngineResponse{Version: snap.Version, Summary: summary}, nil
}

func (a *adminService) RemoveEngine(ctx context.Context, in *sluicev1.RemoveEngineRequest) (*sluicev1.RemoveEngineResponse, error) {
	snap, summary, err := a.change(ctx, in.GetBasedOnVersion(), func(doc *config.Document) error {
		i := engineIndex(doc, in.GetId())
		if i < 0 {
			return notFound("ENGINE_NOT_FOUND", "engine %q is not in the configuration's worker list", in.GetId())
		}
		doc.Engines = slices.Delete(doc.Engines, i, i+1)
		dropFromGroups(doc, in.GetId())
		return nil
	})
	if err != nil {
		return nil, err
	}
	return &sluicev1.RemoveEngineResponse{Version: snap.Version, Summary: summary}, nil
}
