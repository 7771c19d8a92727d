package pluginhost

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/hoardproject/hoard/plugins"
)

// DescribeSettings asks one plugin for its settings schema without
// configuring it: a builtin is built with its Factory and asked
// in-process, a binary is launched, asked over gRPC and stopped. It
// returns plugins.ErrNoSchema when the plugin describes none. The schema
// is checked (SettingsSchema.Validate) before it is returned.
func DescribeSettings(ctx context.Context, spec Spec, builtins map[string]plugins.Factory, logger *slog.Logger, timeout time.Duration) (plugins.SettingsSchema, error) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	logger = logger.With("plugin", spec.Name)
	var inst *instance
	var err error
	if spec.Path == "" {
		factory, ok := builtins[spec.Name]
		if !ok {
			return plugins.SettingsSchema{}, fmt.Errorf("no builtin plugin %q", spec.Name)
		}
		inst, err = startBuiltin(ctx, factory, logger, timeout, 1)
	} else {
		inst, err = startExternal(spec.Path, logger, timeout, 1)
	}
	if err != nil {
		return plugins.SettingsSchema{}, err
	}
	defer inst.stop(timeout)
	var schema plugins.SettingsSchema
	err = inst.call(ctx, timeout, func(ctx context.Context, p plugins.Plugin) error {
		d, ok := p.(plugins.SettingsDescriber)
		if !ok {
			return plugins.ErrNoSchema
		}
		var err error
		schema, err = d.SettingsSchema(ctx)
		return err
	})
	if err != nil {
		if errors.Is(err, plugins.ErrNoSchema) {
			return plugins.SettingsSchema{}, err
		}
		return plugins.SettingsSchema{}, fmt.Errorf("plugin %s: settings schema: %w", spec.Name, err)
	}
	if err := schema.Validate(); err != nil {
		return plugins.SettingsSchema{}, fmt.Errorf("plugin %s: settings schema: %w", spec.Name, err)
	}
	return schema, nil
}
