package decider

import (
	"context"
	"encoding/json"
	"slices"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	sluicev1 "github.com/sluicehq/sluice/gen/sluice/v1"
	"github.com/sluicehq/sluice/gen/sluice/v1/sluicev1connect"
	"github.com/sluicehq/sluice/state/config"
	"github.com/sluicehq/sluice/state/inflight"
	"github.com/sluicehq/sluice/state/loadtable"
	"github.com/sluicehq/sluice/state/registry"
)

// adminService serves the read side of AdminService: engines with health and load, and the
// configuration snapshot in use. Configuration writes arrive with the Postgres store.
type adminService struct {
	reg    *registry.Registry
	load   *loadtable.Table
	leases *inflight.Tracker
	store  interface{ Current() config.Snapshot }
}

func (a *adminService) listEngines(in *sluicev1.ListEnginesRequest) *sluicev1.ListEnginesResponse {
	reg := a.reg.Snapshot()
	snap := a.load.Snapshot()
	out := &sluicev1.ListEnginesResponse{}
	for _, w := range reg.Workers() {
		if m := in.GetModel(); m != "" && !slices.Contains(w.Models, m) {
			continue
		}
		h, _ := reg.Health(w.ID)
		e := &sluicev1.Engine{Id: w.ID, Url: w.URL, Models: slices.Clone(w.Models), Role: roleToProto(w.Role),
			BootstrapPort: w.BootstrapPort, Labels: w.Labels, Healthy: h.Healthy, HealthReason: h.Reason,
			Load: &sluicev1.EngineLoad{Inflight: a.leases.InFlight(w.Slot)}}
		if v, ok := snap.View(w.Slot); ok {
			e.Load.LoadKnown = true
			e.Load.Running, e.Load.Waiting = v.Running, v.Waiting
			e.Load.KvUsed, e.Load.KvCapacity = v.KVUsedTokens, v.KVCapacityTokens
			e.Load.CapturedAt = timestamppb.New(v.CapturedAt)
		}
		out.Engines = append(out.Engines, e)
	}
	return out
}

func (a *adminService) getConfig() (*sluicev1.GetConfigResponse, error) {
	snap := a.store.Current()
	doc, err := json.Marshal(snap.Document)
	if err != nil {
		return nil, err
	}
	return &sluicev1.GetConfigResponse{Version: snap.Version, DocumentJson: string(doc),
		LoadedAt: timestamppb.New(snap.LoadedAt), Source: snap.Source}, nil
}

// grpcAdmin is the native gRPC (and grpc-gateway) face of adminService.
type grpcAdmin struct {
	sluicev1.UnimplementedAdminServiceServer
	a *adminService
}

func (g grpcAdmin) ListEngines(_ context.Context, in *sluicev1.ListEnginesRequest) (*sluicev1.ListEnginesResponse, error) {
	return g.a.listEngines(in), nil
}

func (g grpcAdmin) GetConfig(_ context.Context, _ *sluicev1.GetConfigRequest) (*sluicev1.GetConfigResponse, error) {
	out, err := g.a.getConfig()
	if err != nil {
		return nil, grpcError(err)
	}
	return out, nil
}

// connectAdmin is the Connect face of adminService.
type connectAdmin struct {
	a *adminService
}

var _ sluicev1connect.AdminServiceHandler = connectAdmin{}

func (c connectAdmin) ListEngines(_ context.Context, req *connect.Request[sluicev1.ListEnginesRequest]) (*connect.Response[sluicev1.ListEnginesResponse], error) {
	return connect.NewResponse(c.a.listEngines(req.Msg)), nil
}

func (c connectAdmin) GetConfig(_ context.Context, _ *connect.Request[sluicev1.GetConfigRequest]) (*connect.Response[sluicev1.GetConfigResponse], error) {
	out, err := c.a.getConfig()
	if err != nil {
		return nil, connectError(err)
	}
	return connect.NewResponse(out), nil
}
