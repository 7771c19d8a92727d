package plugins_test

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hoardproject/hoard/plugins"
)

// A schema a host cannot print or check from is refused, each problem
// named.
func TestSettingsSchemaValidate(t *testing.T) {
	good := plugins.SettingsSchema{Keys: []plugins.SettingKey{
		{Key: "mode", Default: json.RawMessage(`"open"`), Help: "open or private"},
		{Key: "limits.addresses", Default: json.RawMessage(`131072`), Help: "addresses tracked"},
	}}
	require.NoError(t, good.Validate())
	require.True(t, good.IsSection("limits"))
	require.False(t, good.IsSection("mode"))
	k, ok := good.Lookup("limits.addresses")
	require.True(t, ok)
	require.JSONEq(t, `131072`, string(k.Default))

	bad := plugins.SettingsSchema{Keys: []plugins.SettingKey{
		{Key: "Mode", Default: json.RawMessage(`"x"`)},
		{Key: "limits", Default: json.RawMessage(`{}`)},
		{Key: "limits.rate", Default: json.RawMessage(`five`)},
		{Key: "limits.rate", Default: json.RawMessage(`5`), Help: "two\nlines"},
	}}
	err := bad.Validate()
	require.Error(t, err)
	for _, want := range []string{
		`setting key "Mode" must be words`,
		`setting key "limits.rate": default "five" is not JSON`,
		`setting key "limits.rate" is described twice`,
		`setting key "limits.rate": help is more than one line`,
		`setting key "limits" is also a section of other keys`,
	} {
		require.ErrorContains(t, err, want)
	}
}
