package ctl

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"connectrpc.com/connect"
	"go.yaml.in/yaml/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	sluicev1 "github.com/sluicehq/sluice/gen/sluice/v1"
	"github.com/sluicehq/sluice/state/config"
)

// localInvalid is a file that does not parse locally (diff checks before comparing).
type localInvalid struct{ err error }

func (e *localInvalid) Error() string { return e.err.Error() }

func (c *cli) readFile() ([]byte, error) {
	switch c.file {
	case "":
		return nil, usagef("-f FILE is required")
	case "-":
		return io.ReadAll(os.Stdin)
	}
	return os.ReadFile(c.file)
}

// print writes m as JSON or YAML when -o asks for it and reports whether it did. Numbers stay
// integers (YAML would print a float64 1048576 as 1.048576e+06) and int64 fields, which
// ProtoJSON writes as strings, are printed as numbers.
func (c *cli) print(m proto.Message) (bool, error) {
	if c.output != "json" && c.output != "yaml" {
		return false, nil
	}
	raw, err := protojson.MarshalOptions{UseProtoNames: true, EmitUnpopulated: false}.Marshal(m)
	if err != nil {
		return true, err
	}
	v, err := decodeNumbers(raw)
	if err != nil {
		return true, err
	}
	return true, c.write(int64Fields(v, m.ProtoReflect().Descriptor()))
}

// write prints v as -o asks: indented JSON, or YAML.
func (c *cli) write(v any) error {
	if c.output == "json" {
		out, err := json.MarshalIndent(v, "", "  ")
		if err != nil {
			return err
		}
		_, err = fmt.Fprintln(c.stdout, string(out))
		return err
	}
	out, err := yaml.Marshal(v)
	if err != nil {
		return err
	}
	_, err = c.stdout.Write(out)
	return err
}

// decodeNumbers decodes JSON keeping every integer an int64 (other numbers float64).
func decodeNumbers(raw []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	return numbers(v), nil
}

func numbers(v any) any {
	switch x := v.(type) {
	case json.Number:
		if i, err := x.Int64(); err == nil {
			return i
		}
		f, _ := x.Float64()
		return f
	case map[string]any:
		for k, e := range x {
			x[k] = numbers(e)
		}
	case []any:
		for i, e := range x {
			x[i] = numbers(e)
		}
	}
	return v
}

// int64Fields turns the decimal strings ProtoJSON writes for 64-bit integer fields of md back
// into numbers, following the message's fields (keys are proto names) into nested messages.
func int64Fields(v any, md protoreflect.MessageDescriptor) any {
	obj, ok := v.(map[string]any)
	if !ok || md == nil || md.FullName().Parent() == "google.protobuf" {
		return v
	}
	fields := md.Fields()
	for k, e := range obj {
		fd := fields.ByName(protoreflect.Name(k))
		if fd == nil {
			continue
		}
		conv := func(e any) any {
			switch fd.Kind() {
			case protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind:
				if s, ok := e.(string); ok {
					if i, err := strconv.ParseInt(s, 10, 64); err == nil {
						return i
					}
				}
			case protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
				if s, ok := e.(string); ok {
					if u, err := strconv.ParseUint(s, 10, 64); err == nil {
						return u
					}
				}
			case protoreflect.MessageKind:
				if !fd.IsMap() {
					return int64Fields(e, fd.Message())
				}
			}
			return e
		}
		if list, ok := e.([]any); ok && fd.IsList() {
			for i, x := range list {
				list[i] = conv(x)
			}
			continue
		}
		obj[k] = conv(e)
	}
	return obj
}

func noArgs(args []string) error {
	if len(args) > 0 {
		return usagef("unexpected argument %q", args[0])
	}
	return nil
}

func runApply(ctx context.Context, c *cli, args []string) error {
	return c.applyFile(ctx, args, false)
}

func runValidate(ctx context.Context, c *cli, args []string) error {
	return c.applyFile(ctx, args, true)
}

func (c *cli) applyFile(ctx context.Context, args []string, validateOnly bool) error {
	if err := noArgs(args); err != nil {
		return err
	}
	data, err := c.readFile()
	if err != nil {
		return err
	}
	resp, err := c.client().ApplyConfig(ctx, connect.NewRequest(&sluicev1.ApplyConfigRequest{
		Document: string(data), BasedOnVersion: c.basedOn, ValidateOnly: validateOnly}))
	if err != nil {
		return err
	}
	if done, err := c.print(resp.Msg); done {
		return err
	}
	if validateOnly {
		fmt.Fprintf(c.stdout, "valid against version %d (%s)\n", resp.Msg.GetVersion(), resp.Msg.GetSummary())
		return nil
	}
	fmt.Fprintf(c.stdout, "applied version %d (%s)\n", resp.Msg.GetVersion(), resp.Msg.GetSummary())
	return nil
}

func runGet(ctx context.Context, c *cli, args []string) error {
	if len(args) != 1 {
		return usagef("get wants one of: buckets, engines, shards, config")
	}
	switch args[0] {
	case "buckets", "bucket":
		resp, err := c.client().ListBuckets(ctx, connect.NewRequest(&sluicev1.ListBucketsRequest{}))
		if err != nil {
			return err
		}
		if done, err := c.print(resp.Msg); done {
			return err
		}
		tw := tabwriter.NewWriter(c.stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintf(tw, "ID\tRANK\tINPUT TOKENS\tGROUPS\n")
		for _, b := range resp.Msg.GetBuckets() {
			m := b.AsMap()
			fmt.Fprintf(tw, "%v\t%v\t%s\t%s\n", m["id"], orZero(m["rank"]), limits(m["limits"]), groups(m["groups"]))
		}
		fmt.Fprintf(tw, "(configuration version %d)\n", resp.Msg.GetVersion())
		return tw.Flush()
	case "config":
		return c.getConfig(ctx)
	case "shards", "shard":
		return c.getShards(ctx)
	case "engines", "engine":
		resp, err := c.client().ListEngines(ctx, connect.NewRequest(&sluicev1.ListEnginesRequest{}))
		if err != nil {
			return err
		}
		if done, err := c.print(resp.Msg); done {
			return err
		}
		tw := tabwriter.NewWriter(c.stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintf(tw, "ID\tROLE\tMODELS\tURL\tHEALTHY\tINFLIGHT\n")
		for _, e := range resp.Msg.GetEngines() {
			role := strings.ToLower(strings.TrimPrefix(e.GetRole().String(), "ROLE_"))
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%v\t%d\n", e.GetId(), role, strings.Join(e.GetModels(), ","), e.GetUrl(), e.GetHealthy(), e.GetLoad().GetInflight())
		}
		return tw.Flush()
	}
	return usagef("get %q: want buckets, engines, shards or config", args[0])
}

// configInForce fetches the configuration in force and parses its document.
func (c *cli) configInForce(ctx context.Context) (*connect.Response[sluicev1.GetConfigResponse], *config.Document, error) {
	resp, err := c.client().GetConfig(ctx, connect.NewRequest(&sluicev1.GetConfigRequest{}))
	if err != nil {
		return nil, nil, err
	}
	doc, err := config.Parse([]byte(resp.Msg.GetDocumentJson()), config.FormatJSON)
	if err != nil {
		return nil, nil, fmt.Errorf("server configuration version %d: %w", resp.Msg.GetVersion(), err)
	}
	return resp, doc, nil
}

// getConfig prints the configuration document in force in the form apply -f reads: YAML
// (the default and -o yaml) headed by a comment naming the version, or the JSON document
// (-o json).
func (c *cli) getConfig(ctx context.Context) error {
	resp, doc, err := c.configInForce(ctx)
	if err != nil {
		return err
	}
	format := config.FormatYAML
	if c.output == "json" {
		format = config.FormatJSON
	}
	out, err := config.Marshal(doc, format)
	if err != nil {
		return err
	}
	if format == config.FormatYAML {
		fmt.Fprintf(c.stdout, "# sluice configuration version %d (%s); `sluice ctl apply -f` takes this file back\n", resp.Msg.GetVersion(), resp.Msg.GetSource())
	}
	_, err = c.stdout.Write(out)
	return err
}

// getShards lists the configuration's model shards (docs/decisions.md, "Model-sharded
// deciders"): each shard's models, the deciders a WRONG_SHARD names and the topics its records
// travel on, then the models the document's workers serve that no shard lists (the unsharded
// deciders serve them). -o json/yaml prints the shards list as the document holds it.
func (c *cli) getShards(ctx context.Context) error {
	resp, doc, err := c.configInForce(ctx)
	if err != nil {
		return err
	}
	if c.output == "json" || c.output == "yaml" {
		shards := doc.Shards
		if shards == nil {
			shards = []config.ShardSpec{}
		}
		return c.write(map[string]any{"version": resp.Msg.GetVersion(), "shards": shards})
	}
	var unsharded []string
	for _, w := range doc.Engines {
		for _, m := range w.Models {
			if _, ok := doc.ShardOf(m); !ok {
				unsharded = append(unsharded, m)
			}
		}
	}
	slices.Sort(unsharded)
	unsharded = slices.Compact(unsharded)
	tw := tabwriter.NewWriter(c.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "ID\tMODELS\tDECIDERS\tTOPICS\n")
	for _, s := range doc.Shards {
		deciders := strings.Join(s.Deciders, ",")
		if deciders == "" {
			deciders = "(none listed)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t<topic>.%s\n", s.ID, strings.Join(s.Models, ","), deciders, s.ID)
	}
	switch {
	case len(doc.Shards) == 0:
		fmt.Fprintf(tw, "(configuration version %d has no shards: every decider serves every model)\n", resp.Msg.GetVersion())
	case len(unsharded) == 0:
		fmt.Fprintf(tw, "(configuration version %d; every worker's model is in a shard)\n", resp.Msg.GetVersion())
	default:
		fmt.Fprintf(tw, "(configuration version %d; served by the unsharded deciders: %s)\n", resp.Msg.GetVersion(), strings.Join(unsharded, ","))
	}
	return tw.Flush()
}

func orZero(v any) any {
	if v == nil {
		return 0
	}
	return v
}

func limits(v any) string {
	m, _ := v.(map[string]any)
	lo, hi := "0", "∞"
	if x, ok := m["min"]; ok {
		lo = fmt.Sprint(x)
	}
	if x, ok := m["max"]; ok {
		hi = fmt.Sprint(x)
	}
	return lo + "–" + hi
}

func groups(v any) string {
	m, _ := v.(map[string]any)
	var parts []string
	describe := func(stage string, g any) {
		gm, _ := g.(map[string]any)
		policy := "inherited"
		if p, ok := gm["policy"].(map[string]any); ok {
			policy = fmt.Sprint(p["type"])
		}
		members := "all"
		if ids, ok := gm["worker_ids"].([]any); ok {
			s := make([]string, len(ids))
			for i, id := range ids {
				s[i] = fmt.Sprint(id)
			}
			members = "[" + strings.Join(s, ",") + "]"
		}
		parts = append(parts, fmt.Sprintf("%s %s %s", stage, policy, members))
	}
	if g, ok := m["plain"]; ok {
		describe("plain", g)
	}
	if pd, ok := m["pd"].(map[string]any); ok {
		describe("prefill", pd["prefill"])
		describe("decode", pd["decode"])
	}
	return strings.Join(parts, "; ")
}

func runVersions(ctx context.Context, c *cli, args []string) error {
	if err := noArgs(args); err != nil {
		return err
	}
	resp, err := c.client().ListVersions(ctx, connect.NewRequest(&sluicev1.ListVersionsRequest{Limit: int32(c.limit)}))
	if err != nil {
		return err
	}
	if done, err := c.print(resp.Msg); done {
		return err
	}
	tw := tabwriter.NewWriter(c.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "VERSION\tCREATED\tAUTHOR\tSUMMARY\n")
	for _, v := range resp.Msg.GetVersions() {
		mark := " "
		if v.GetVersion() == resp.Msg.GetCurrentVersion() {
			mark = "*"
		}
		fmt.Fprintf(tw, "%s%d\t%s\t%s\t%s\n", mark, v.GetVersion(), v.GetCreatedAt().AsTime().Local().Format(time.DateTime), v.GetAuthor(), v.GetSummary())
	}
	return tw.Flush()
}

func runRollback(ctx context.Context, c *cli, args []string) error {
	if len(args) != 1 {
		return usagef("rollback wants one version number")
	}
	n, err := strconv.ParseInt(args[0], 10, 64)
	if err != nil || n < 1 {
		return usagef("rollback %q: want a version number >= 1", args[0])
	}
	resp, err := c.client().Rollback(ctx, connect.NewRequest(&sluicev1.RollbackRequest{Version: n, BasedOnVersion: c.basedOn}))
	if err != nil {
		return err
	}
	if done, err := c.print(resp.Msg); done {
		return err
	}
	fmt.Fprintf(c.stdout, "rolled back to version %d's configuration as version %d\n", n, resp.Msg.GetVersion())
	return nil
}

func runDiff(ctx context.Context, c *cli, args []string) error {
	if err := noArgs(args); err != nil {
		return err
	}
	data, err := c.readFile()
	if err != nil {
		return err
	}
	local, err := config.Parse(data, config.FormatForPath(c.file))
	if err != nil {
		return &localInvalid{fmt.Errorf("%s: %w", c.file, err)}
	}
	resp, err := c.client().GetConfig(ctx, connect.NewRequest(&sluicev1.GetConfigRequest{}))
	if err != nil {
		return err
	}
	remote, err := config.Parse([]byte(resp.Msg.GetDocumentJson()), config.FormatJSON)
	if err != nil {
		return fmt.Errorf("server configuration version %d: %w", resp.Msg.GetVersion(), err)
	}
	a, err := config.Marshal(remote, config.FormatYAML)
	if err != nil {
		return err
	}
	b, err := config.Marshal(local, config.FormatYAML)
	if err != nil {
		return err
	}
	if string(a) == string(b) {
		fmt.Fprintf(c.stdout, "no differences from version %d\n", resp.Msg.GetVersion())
		return nil
	}
	fmt.Fprintf(c.stdout, "--- server (version %d)\n+++ %s\n", resp.Msg.GetVersion(), c.file)
	for _, l := range lineDiff(strings.Split(strings.TrimSuffix(string(a), "\n"), "\n"), strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")) {
		fmt.Fprintln(c.stdout, l)
	}
	fmt.Fprintf(c.stdout, "summary: %s\n", config.Summarize(remote, local))
	return errDiffers
}

// lineDiff returns a and b merged by their longest common subsequence: kept lines start with
// two spaces, removed with "- ", added with "+ ".
func lineDiff(a, b []string) []string {
	n, m := len(a), len(b)
	lcs := make([][]int, n+1)
	for i := range lcs {
		lcs[i] = make([]int, m+1)
	}
	for i := n - 1; i >= 0; i-- {
		for j := m - 1; j >= 0; j-- {
			if a[i] == b[j] {
				lcs[i][j] = lcs[i+1][j+1] + 1
			} else {
				lcs[i][j] = max(lcs[i+1][j], lcs[i][j+1])
			}
		}
	}
	var out []string
	i, j := 0, 0
	for i < n || j < m {
		switch {
		case i < n && j < m && a[i] == b[j]:
			out = append(out, "  "+a[i])
			i++
			j++
		case j < m && (i == n || lcs[i][j+1] >= lcs[i+1][j]):
			out = append(out, "+ "+b[j])
			j++
		default:
			out = append(out, "- "+a[i])
			i++
		}
	}
	return slices.Clip(out)
}
