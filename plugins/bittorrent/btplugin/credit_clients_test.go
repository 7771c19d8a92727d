package btplugin_test

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hoardproject/hoard/internal/redistest"
	"github.com/hoardproject/hoard/plugins/bittorrent/swarm"
)

// Issue 28.1 with real clients: an aria2c seeder and an aria2c leecher
// (each with its own passkey in its .torrent's announce URL) move a file
// through hoard in private mode, once per torrent status and once with a
// personal token. Each side's credited transfer is its raw transfer times
// the status's rates, counted once, however many announces aria2c sent:
// exactly the deltas aria2c announced (recorded by a proxy in front of
// the tracker), each times the rates and rounded down.
func TestAria2TransferIsCreditedOnceUnderEachStatus(t *testing.T) {
	requireCommand(t, "aria2c", "aria2")
	requireCommand(t, "mktorrent", "mktorrent")
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		tr, addrs := startTracker(t, b, `{"mode":"private","http":"127.0.0.1:0","udp4":"","udp6":"","interval":"1m"}`)
		announced, proxy := newAnnounceLog(t, addrs["http"])
		store := tr.Store()
		ctx := context.Background()
		require.NoError(t, store.AddClient(ctx, "A2-", "aria2"))
		cases := []struct {
			name     string
			credit   swarm.Credit
			token    bool
			up, down int64 // percent
		}{
			{"normal", swarm.Credit{Kind: swarm.CreditNormal}, false, 100, 100},
			{"freeleech", swarm.Credit{Kind: swarm.CreditFreeleech}, false, 100, 0},
			{"neutral", swarm.Credit{Kind: swarm.CreditNeutral}, false, 0, 0},
			{"double", swarm.Credit{Kind: swarm.CreditDoubleUpload}, false, 200, 100},
			{"percent_off", swarm.Credit{Kind: swarm.CreditPercentOff, PercentOff: 25}, false, 100, 75},
			{"token", swarm.Credit{Kind: swarm.CreditNormal}, true, 100, 0},
		}
		// Each status on its own torrent, seeder and leecher (their own
		// passkeys, so the proxy's log splits by case): the cases run side by
		// side, each a real download.
		for i, c := range cases {
			seedKey, leechKey := strings.Repeat(string(rune('a'+i)), 32), strings.Repeat(string(rune('n'+i)), 32)
			seederID, leecherID := "seeder-"+c.name, "leecher-"+c.name
			require.NoError(t, store.AddUser(ctx, seedKey, seederID))
			require.NoError(t, store.AddUser(ctx, leechKey, leecherID))
			t.Run(c.name, func(t *testing.T) {
				t.Parallel()
				dir := t.TempDir()
				leechDir := filepath.Join(dir, "leech")
				seedDir, payload := writeSeedPayload(t, dir, 1<<20+int(i)*4099)
				seedTorrent := passkeyTorrent(t, dir, seedDir, proxy, seedKey)
				leechTorrent := passkeyTorrent(t, dir, seedDir, proxy, leechKey)
				hash := infoHashOf(t, seedTorrent)
				require.Equal(t, hash, infoHashOf(t, leechTorrent))
				require.NoError(t, store.RegisterTorrent(ctx, hash, "t"+c.name))
				require.NoError(t, store.SetTorrentCredit(ctx, hash, c.credit))
				if c.token {
					require.NoError(t, store.GrantToken(ctx, hash, leecherID, time.Time{}))
				}

				runCtx, cancel := context.WithTimeout(ctx, 2*time.Minute)
				seeder := exec.CommandContext(runCtx, "aria2c", append(aria2Flags(seedDir, freePort(t)), "--seed-ratio=0.0", seedTorrent)...)
				seederLog := &lockedBuffer{}
				seeder.Stdout, seeder.Stderr = seederLog, seederLog
				require.NoError(t, seeder.Start())
				waitFor(t, "the seeder's announce", func() bool {
					info, err := store.Torrent(ctx, hash)
					return err == nil && info.Seeders == 1
				})
				leecher := exec.CommandContext(runCtx, "aria2c", append(aria2Flags(leechDir, freePort(t)), "--seed-time=0", leechTorrent)...)
				out, err := leecher.CombinedOutput()
				if err != nil {
					cancel()
					t.Fatalf("%s: leecher: %v\n%s\nseeder: %s", c.name, err, out, seederLog.String())
				}
				got, err := os.ReadFile(filepath.Join(leechDir, "payload.bin"))
				require.NoError(t, err)
				require.True(t, bytes.Equal(payload, got), c.name)
				// The seeder's upload reaches hoard with its stop.
				require.NoError(t, seeder.Process.Signal(os.Interrupt))
				_ = seeder.Wait()
				cancel()

				l, err := store.UserOnTorrent(ctx, hash, leecherID)
				require.NoError(t, err)
				s, err := store.UserOnTorrent(ctx, hash, seederID)
				require.NoError(t, err)
				require.GreaterOrEqual(t, l.Downloaded, int64(len(payload)), c.name)
				require.Less(t, l.Downloaded, int64(len(payload))*2, "%s: downloaded once, not doubled", c.name)
				require.Positive(t, s.Uploaded, c.name)
				// What aria2c announced on this torrent, each delta credited
				// at the case's rates, rounded down per announce.
				var want [4]int64 // leecher down, credited; seeder up, credited
				for _, d := range deltas(t, announced.of(leechKey)) {
					want[0], want[1] = want[0]+d.down, want[1]+d.down*c.down/100
				}
				for _, d := range deltas(t, announced.of(seedKey)) {
					want[2], want[3] = want[2]+d.up, want[3]+d.up*c.up/100
				}
				require.Equal(t, want, [4]int64{l.Downloaded, l.DownCredited, s.Uploaded, s.UpCredited},
					"%s: (leecher downloaded, credited, seeder uploaded, credited) as announced", c.name)
				if c.token {
					require.False(t, l.TokenUsed.IsZero(), "the token was used")
				}
				t.Logf("%s: leecher downloaded %d, credited %d; seeder uploaded %d, credited %d",
					c.name, l.Downloaded, l.DownCredited, s.Uploaded, s.UpCredited)
			})
		}
	})
}
