package plugins

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/emptypb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/hoardproject/hoard/plugins/pluginpb"
)

// ProtocolVersion is the version of the plugin protocol (pluginpb) this
// hoard speaks. Bump it on any change old plugins cannot serve; the
// handshake then refuses mismatched binaries with ErrIncompatible instead of
// letting them fail call by call.
const ProtocolVersion = 1

// PluginSetKey is the one plugin a hoard plugin binary serves, the name the
// host dispenses.
const PluginSetKey = "plugin"

// Handshake is the go-plugin handshake of hoard plugins. The magic cookie is
// not a secret: it only stops a plugin binary run by hand from waiting
// forever for a host, and stops hoard from driving some other program's
// plugin.
func Handshake() plugin.HandshakeConfig {
	return plugin.HandshakeConfig{
		ProtocolVersion:  ProtocolVersion,
		MagicCookieKey:   "HOARD_PLUGIN_MAGIC_COOKIE",
		MagicCookieValue: "a4bd0b7c3c2e4f4e9b1d2f8e6c5a7d90-hoard-plugin",
	}
}

// PluginSet is the go-plugin plugin set a hoard plugin binary serves (impl
// set) and the host dispenses (impl nil).
func PluginSet(impl Plugin) plugin.PluginSet {
	return plugin.PluginSet{PluginSetKey: &GRPCPlugin{Impl: impl}}
}

// GRPCPlugin adapts the Plugin contract to go-plugin's gRPC transport. On
// the plugin side it serves Impl; on the host side it returns a Plugin that
// forwards every call over gRPC.
type GRPCPlugin struct {
	plugin.NetRPCUnsupportedPlugin
	Impl Plugin
}

// GRPCServer registers Impl on the plugin process' gRPC server.
func (p *GRPCPlugin) GRPCServer(broker *plugin.GRPCBroker, s *grpc.Server) error {
	if p.Impl == nil {
		return errors.New("plugins: GRPCPlugin has no Impl to serve")
	}
	pluginpb.RegisterPluginServer(s, &grpcServer{impl: p.Impl, broker: broker})
	return nil
}

// GRPCClient returns the host's view of the plugin: a Plugin over conn.
func (p *GRPCPlugin) GRPCClient(_ context.Context, broker *plugin.GRPCBroker, conn *grpc.ClientConn) (any, error) {
	return &grpcClient{client: pluginpb.NewPluginClient(conn), broker: broker}, nil
}

// grpcClient is a Plugin in another process.
type grpcClient struct {
	client pluginpb.PluginClient
	broker *plugin.GRPCBroker
}

var _ Plugin = (*grpcClient)(nil)

func (c *grpcClient) Configure(ctx context.Context, cfg Config) error {
	req := &pluginpb.ConfigureRequest{Name: cfg.Name, RedisUrl: cfg.RedisURL, Settings: cfg.Settings}
	if cfg.Host != nil && c.broker != nil {
		// The Host service runs on its own broker stream until the
		// plugin's connection closes (the plugin exits or is killed).
		req.HostBrokerId = c.broker.NextId()
		go c.broker.AcceptAndServe(req.HostBrokerId, func(opts []grpc.ServerOption) *grpc.Server {
			srv := grpc.NewServer(opts...)
			pluginpb.RegisterHostServer(srv, &hostGRPCServer{api: cfg.Host})
			return srv
		})
	}
	_, err := c.client.Configure(ctx, req)
	return fromStatus(err)
}

func (c *grpcClient) Describe(ctx context.Context) (Description, error) {
	reply, err := c.client.Describe(ctx, &emptypb.Empty{})
	if err != nil {
		return Description{}, fromStatus(err)
	}
	return descriptionFromProto(reply), nil
}

func (c *grpcClient) OnItemDone(ctx context.Context, ev ItemEvent) error {
	_, err := c.client.OnItemDone(ctx, itemEventToProto(ev))
	return fromStatus(err)
}

func (c *grpcClient) OnReclaim(ctx context.Context, ev ItemEvent) error {
	_, err := c.client.OnReclaim(ctx, itemEventToProto(ev))
	return fromStatus(err)
}

func (c *grpcClient) OnTick(ctx context.Context, tick Tick) (TickResult, error) {
	reply, err := c.client.OnTick(ctx, &pluginpb.Tick{
		Job: tick.Job, Scheduled: timestampToProto(tick.Scheduled), At: timestampToProto(tick.At), Missed: tick.Missed,
	})
	if err != nil {
		return TickResult{}, fromStatus(err)
	}
	result := TickResult{Enqueue: make([]QueueItem, 0, len(reply.GetEnqueue()))}
	for _, item := range reply.GetEnqueue() {
		result.Enqueue = append(result.Enqueue, QueueItem{Project: item.GetProject(), Item: item.GetItem(), Score: item.GetScore()})
	}
	return result, nil
}

func (c *grpcClient) Stats(ctx context.Context) (Stats, error) {
	reply, err := c.client.Stats(ctx, &emptypb.Empty{})
	if err != nil {
		return Stats{}, fromStatus(err)
	}
	stats := Stats{Metrics: make([]Metric, 0, len(reply.GetMetrics()))}
	for _, m := range reply.GetMetrics() {
		stats.Metrics = append(stats.Metrics, Metric{
			Name: m.GetName(), Help: m.GetHelp(), Kind: MetricKind(m.GetKind()), Value: m.GetValue(), Labels: m.GetLabels(),
		})
	}
	return stats, nil
}

func (c *grpcClient) Health(ctx context.Context) error {
	_, err := c.client.Health(ctx, &emptypb.Empty{})
	return fromStatus(err)
}

func (c *grpcClient) HandleRequest(ctx context.Context, req Request) (Response, error) {
	reply, err := c.client.HandleRequest(ctx, &pluginpb.Request{
		Method: req.Method, Path: req.Path, Query: req.Query, Headers: headerToProto(req.Header), Body: req.Body,
		Actor: req.Actor, Role: req.Role, Scopes: req.Scopes,
	})
	if status.Code(err) == codes.Unimplemented {
		return Response{}, fmt.Errorf("%s: %w", status.Convert(err).Message(), ErrNoAPI)
	}
	if err != nil {
		return Response{}, fromStatus(err)
	}
	out := Response{Status: int(reply.GetStatus()), Header: headerFromProto(reply.GetHeaders()), Body: reply.GetBody()}
	for _, ch := range reply.GetChanges() {
		out.Changes = append(out.Changes, Change{What: ch.GetWhat(), Details: ch.GetDetails()})
	}
	return out, nil
}

// SettingsSchema asks the plugin to describe its settings; a binary built
// before the call answers Unimplemented, which is ErrNoSchema.
func (c *grpcClient) SettingsSchema(ctx context.Context) (SettingsSchema, error) {
	reply, err := c.client.SettingsSchema(ctx, &emptypb.Empty{})
	if status.Code(err) == codes.Unimplemented {
		return SettingsSchema{}, fmt.Errorf("%s: %w", status.Convert(err).Message(), ErrNoSchema)
	}
	if err != nil {
		return SettingsSchema{}, fromStatus(err)
	}
	out := SettingsSchema{Keys: make([]SettingKey, 0, len(reply.GetKeys()))}
	for _, k := range reply.GetKeys() {
		out.Keys = append(out.Keys, SettingKey{Key: k.GetKey(), Default: k.GetDefaultJson(), Help: k.GetHelp(), Secret: k.GetSecret()})
	}
	return out, nil
}

func (c *grpcClient) Close(ctx context.Context) error {
	_, err := c.client.Close(ctx, &emptypb.Empty{})
	return fromStatus(err)
}

// grpcServer serves a Plugin to the host.
type grpcServer struct {
	pluginpb.UnimplementedPluginServer
	impl   Plugin
	broker *plugin.GRPCBroker
}

func (s *grpcServer) Configure(ctx context.Context, req *pluginpb.ConfigureRequest) (*emptypb.Empty, error) {
	cfg := Config{Name: req.GetName(), RedisURL: req.GetRedisUrl(), Settings: req.GetSettings()}
	if id := req.GetHostBrokerId(); id != 0 && s.broker != nil {
		conn, err := s.broker.Dial(id)
		if err != nil {
			return nil, toStatus(fmt.Errorf("dial the host API: %w", err))
		}
		cfg.Host = &hostGRPCClient{client: pluginpb.NewHostClient(conn)}
	}
	err := s.impl.Configure(ctx, cfg)
	return &emptypb.Empty{}, toStatus(err)
}

func (s *grpcServer) Describe(ctx context.Context, _ *emptypb.Empty) (*pluginpb.Description, error) {
	d, err := s.impl.Describe(ctx)
	if err != nil {
		return nil, toStatus(err)
	}
	return descriptionToProto(d), nil
}

func (s *grpcServer) OnItemDone(ctx context.Context, ev *pluginpb.ItemEvent) (*emptypb.Empty, error) {
	return &emptypb.Empty{}, toStatus(s.impl.OnItemDone(ctx, itemEventFromProto(ev)))
}

func (s *grpcServer) OnReclaim(ctx context.Context, ev *pluginpb.ItemEvent) (*emptypb.Empty, error) {
	return &emptypb.Empty{}, toStatus(s.impl.OnReclaim(ctx, itemEventFromProto(ev)))
}

func (s *grpcServer) OnTick(ctx context.Context, tick *pluginpb.Tick) (*pluginpb.TickResult, error) {
	result, err := s.impl.OnTick(ctx, Tick{
		Job: tick.GetJob(), Scheduled: timestampFromProto(tick.GetScheduled()), At: timestampFromProto(tick.GetAt()), Missed: tick.GetMissed(),
	})
	if err != nil {
		return nil, toStatus(err)
	}
	reply := &pluginpb.TickResult{Enqueue: make([]*pluginpb.QueueItem, 0, len(result.Enqueue))}
	for _, item := range result.Enqueue {
		reply.Enqueue = append(reply.Enqueue, &pluginpb.QueueItem{Project: item.Project, Item: item.Item, Score: item.Score})
	}
	return reply, nil
}

func (s *grpcServer) Stats(ctx context.Context, _ *emptypb.Empty) (*pluginpb.StatsReply, error) {
	stats, err := s.impl.Stats(ctx)
	if err != nil {
		return nil, toStatus(err)
	}
	reply := &pluginpb.StatsReply{Metrics: make([]*pluginpb.Metric, 0, len(stats.Metrics))}
	for _, m := range stats.Metrics {
		reply.Metrics = append(reply.Metrics, &pluginpb.Metric{
			Name: m.Name, Help: m.Help, Kind: pluginpb.Metric_Kind(m.Kind), Value: m.Value, Labels: m.Labels,
		})
	}
	return reply, nil
}

func (s *grpcServer) Health(ctx context.Context, _ *emptypb.Empty) (*emptypb.Empty, error) {
	return &emptypb.Empty{}, toStatus(s.impl.Health(ctx))
}

func (s *grpcServer) HandleRequest(ctx context.Context, req *pluginpb.Request) (*pluginpb.Response, error) {
	resp, err := s.impl.HandleRequest(ctx, Request{
		Method: req.GetMethod(), Path: req.GetPath(), Query: req.GetQuery(), Header: headerFromProto(req.GetHeaders()),
		Body: req.GetBody(), Actor: req.GetActor(), Role: req.GetRole(), Scopes: req.GetScopes(),
	})
	if err != nil {
		return nil, toStatus(err)
	}
	reply := &pluginpb.Response{Status: int32(resp.Status), Headers: headerToProto(resp.Header), Body: resp.Body}
	for _, ch := range resp.Changes {
		reply.Changes = append(reply.Changes, &pluginpb.Change{What: ch.What, Details: ch.Details})
	}
	return reply, nil
}

// SettingsSchema serves the plugin's schema, or Unimplemented when it
// describes none (as a binary built before the call would).
func (s *grpcServer) SettingsSchema(ctx context.Context, _ *emptypb.Empty) (*pluginpb.SettingsSchemaReply, error) {
	d, ok := s.impl.(SettingsDescriber)
	if !ok {
		return nil, status.Error(codes.Unimplemented, ErrNoSchema.Error())
	}
	schema, err := d.SettingsSchema(ctx)
	if err != nil {
		return nil, toStatus(err)
	}
	reply := &pluginpb.SettingsSchemaReply{Keys: make([]*pluginpb.SettingKey, 0, len(schema.Keys))}
	for _, k := range schema.Keys {
		reply.Keys = append(reply.Keys, &pluginpb.SettingKey{Key: k.Key, DefaultJson: k.Default, Help: k.Help, Secret: k.Secret})
	}
	return reply, nil
}

func (s *grpcServer) Close(ctx context.Context, _ *emptypb.Empty) (*emptypb.Empty, error) {
	return &emptypb.Empty{}, toStatus(s.impl.Close(ctx))
}

// toStatus turns a plugin's error into a gRPC status the host can map back
// (Vault's wrapError idea): deadlines and cancellations keep their meaning,
// anything else travels as its message.
func toStatus(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, context.DeadlineExceeded):
		return status.Error(codes.DeadlineExceeded, err.Error())
	case errors.Is(err, context.Canceled):
		return status.Error(codes.Canceled, err.Error())
	case errors.Is(err, ErrNotOwned):
		return status.Error(codes.PermissionDenied, err.Error())
	}
	return status.Error(codes.Unknown, err.Error())
}

// fromStatus turns a gRPC error back into one errors.Is understands.
func fromStatus(err error) error {
	if err == nil {
		return nil
	}
	st, ok := status.FromError(err)
	if !ok {
		return err
	}
	switch st.Code() {
	case codes.DeadlineExceeded:
		return fmt.Errorf("%s: %w", st.Message(), context.DeadlineExceeded)
	case codes.Canceled:
		return fmt.Errorf("%s: %w", st.Message(), context.Canceled)
	case codes.Unavailable:
		return fmt.Errorf("%s: %w", st.Message(), ErrUnavailable)
	case codes.PermissionDenied:
		return fmt.Errorf("%s: %w", st.Message(), ErrNotOwned)
	case codes.Unknown:
		return errors.New(st.Message())
	}
	return fmt.Errorf("plugin call failed (%s): %s", st.Code(), st.Message())
}

func descriptionToProto(d Description) *pluginpb.Description {
	out := &pluginpb.Description{Version: d.Version}
	for _, t := range d.ItemTypes {
		out.ItemTypes = append(out.ItemTypes, &pluginpb.ItemType{
			Name: t.Name, Project: t.Project, ItemPrefix: t.ItemPrefix, ReclaimTtl: durationToProto(t.ReclaimTTL),
			Order: t.Order, DoneMode: t.DoneMode, RecentDone: int64(t.RecentDone), Public: t.Public,
		})
	}
	for _, j := range d.Jobs {
		out.Jobs = append(out.Jobs, &pluginpb.Job{Name: j.Name, Period: durationToProto(j.Period)})
	}
	for _, l := range d.Listeners {
		out.Listeners = append(out.Listeners, &pluginpb.Listener{Name: l.Name, Network: l.Network, Address: l.Address})
	}
	for _, sc := range d.AdminScopes {
		scope := &pluginpb.AdminScope{Name: sc.Name, Help: sc.Help}
		for _, r := range sc.Routes {
			scope.Routes = append(scope.Routes, &pluginpb.ScopeRoute{Methods: r.Methods, Prefix: r.Prefix})
		}
		out.AdminScopes = append(out.AdminScopes, scope)
	}
	for _, p := range d.AdminPages {
		page := &pluginpb.AdminPage{Name: p.Name, Title: p.Title}
		for _, s := range p.Sections {
			section := &pluginpb.PageSection{Title: s.Title, Help: s.Help, Kind: s.Kind, Method: s.Method, Path: s.Path, Rows: s.Rows}
			for _, f := range s.Fields {
				section.Fields = append(section.Fields, &pluginpb.PageField{Name: f.Name, Label: f.Label, In: f.In, Type: f.Type, Required: f.Required})
			}
			page.Sections = append(page.Sections, section)
		}
		out.AdminPages = append(out.AdminPages, page)
	}
	return out
}

func descriptionFromProto(d *pluginpb.Description) Description {
	out := Description{Version: d.GetVersion()}
	for _, t := range d.GetItemTypes() {
		out.ItemTypes = append(out.ItemTypes, ItemType{
			Name: t.GetName(), Project: t.GetProject(), ItemPrefix: t.GetItemPrefix(), ReclaimTTL: durationFromProto(t.GetReclaimTtl()),
			Order: t.GetOrder(), DoneMode: t.GetDoneMode(), RecentDone: int(min(t.GetRecentDone(), 1<<31-1)),
			Public: t.GetPublic(),
		})
	}
	for _, j := range d.GetJobs() {
		out.Jobs = append(out.Jobs, Job{Name: j.GetName(), Period: durationFromProto(j.GetPeriod())})
	}
	for _, l := range d.GetListeners() {
		out.Listeners = append(out.Listeners, Listener{Name: l.GetName(), Network: l.GetNetwork(), Address: l.GetAddress()})
	}
	for _, sc := range d.GetAdminScopes() {
		scope := AdminScope{Name: sc.GetName(), Help: sc.GetHelp()}
		for _, r := range sc.GetRoutes() {
			scope.Routes = append(scope.Routes, ScopeRoute{Methods: r.GetMethods(), Prefix: r.GetPrefix()})
		}
		out.AdminScopes = append(out.AdminScopes, scope)
	}
	for _, p := range d.GetAdminPages() {
		page := AdminPage{Name: p.GetName(), Title: p.GetTitle()}
		for _, s := range p.GetSections() {
			section := PageSection{Title: s.GetTitle(), Help: s.GetHelp(), Kind: s.GetKind(), Method: s.GetMethod(), Path: s.GetPath(), Rows: s.GetRows()}
			for _, f := range s.GetFields() {
				section.Fields = append(section.Fields, PageField{Name: f.GetName(), Label: f.GetLabel(), In: f.GetIn(), Type: f.GetType(), Required: f.GetRequired()})
			}
			page.Sections = append(page.Sections, section)
		}
		out.AdminPages = append(out.AdminPages, page)
	}
	return out
}

func itemEventToProto(ev ItemEvent) *pluginpb.ItemEvent {
	return &pluginpb.ItemEvent{
		ItemType: ev.ItemType, Project: ev.Project, Item: ev.Item, Downloader: ev.Downloader, At: timestampToProto(ev.At),
		Result: ev.Result,
	}
}

func itemEventFromProto(ev *pluginpb.ItemEvent) ItemEvent {
	return ItemEvent{
		ItemType: ev.GetItemType(), Project: ev.GetProject(), Item: ev.GetItem(), Downloader: ev.GetDownloader(), At: timestampFromProto(ev.GetAt()),
		Result: ev.GetResult(),
	}
}

func headerToProto(h http.Header) map[string]*pluginpb.HeaderValues {
	if len(h) == 0 {
		return nil
	}
	out := make(map[string]*pluginpb.HeaderValues, len(h))
	for k, v := range h {
		out[k] = &pluginpb.HeaderValues{Values: v}
	}
	return out
}

func headerFromProto(h map[string]*pluginpb.HeaderValues) http.Header {
	if len(h) == 0 {
		return nil
	}
	out := make(http.Header, len(h))
	for k, v := range h {
		out[k] = v.GetValues()
	}
	return out
}

func durationToProto(d time.Duration) *durationpb.Duration {
	if d == 0 {
		return nil
	}
	return durationpb.New(d)
}

func durationFromProto(d *durationpb.Duration) time.Duration {
	if d == nil {
		return 0
	}
	return d.AsDuration()
}

// timestampToProto keeps the zero time as "unset" so it survives the trip.
func timestampToProto(t time.Time) *timestamppb.Timestamp {
	if t.IsZero() {
		return nil
	}
	return timestamppb.New(t)
}

func timestampFromProto(t *timestamppb.Timestamp) time.Time {
	if t == nil {
		return time.Time{}
	}
	return t.AsTime()
}
