package outbox_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hoardproject/hoard/plugins/bittorrent/outbox"
)

// FuzzParseCursor: the poll cursor parser never panics, and what it
// accepts is the canonical decimal of the id it returns.
func FuzzParseCursor(f *testing.F) {
	for _, s := range []string{"", "1", "17", "0", "-1", "18446744073709551615", "18446744073709551616", "1e3", " 7"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, text string) {
		id, err := outbox.ParseCursor(text)
		if err != nil {
			require.ErrorIs(t, err, outbox.ErrInvalid)
			return
		}
		if text == "" {
			require.Zero(t, id)
			return
		}
		ids, err := outbox.ParseIDs([]string{text})
		require.NoError(t, err)
		require.Equal(t, id, ids[0])
	})
}

// FuzzVerifySignature: the signature header parser never panics and
// never accepts a header for another body; a header Sign made verifies.
func FuzzVerifySignature(f *testing.F) {
	now := time.Unix(1_772_366_400, 0)
	f.Add("t=1772366400,v1=00", []byte("{}"))
	f.Add(outbox.Sign([]byte(testSecret), now, []byte("{}")), []byte("{}"))
	f.Add("t=1,v1=zz,v1=", []byte(""))
	f.Fuzz(func(t *testing.T, header string, body []byte) {
		err := outbox.VerifySignature([]byte(testSecret), header, body, now, outbox.DefaultTolerance)
		if err == nil {
			// Only a real signature over this body passes.
			require.NoError(t, outbox.VerifySignature([]byte(testSecret), outbox.Sign([]byte(testSecret), now, body), body, now, outbox.DefaultTolerance))
			require.Error(t, outbox.VerifySignature([]byte(testSecret), header, append(body, 'x'), now, outbox.DefaultTolerance))
		}
		signed := outbox.Sign([]byte(testSecret), now, body)
		require.NoError(t, outbox.VerifySignature([]byte(testSecret), signed, body, now, outbox.DefaultTolerance))
	})
}
