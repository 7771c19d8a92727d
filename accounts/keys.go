package accounts

// Every key of the accounts carries the hash tag "{auth}", so every script
// touches one slot and the same code runs on one Redis and on Redis
// Cluster. The prefix "hoard:auth:" can never be a project's key, whose
// prefix is "hoard:{<slug>}:". All key names are built here and nowhere
// else; scripts receive them in KEYS.

const prefix = "hoard:auth:{auth}:"

// AccountsKey holds every account (HASH name -> account record, JSON).
const AccountsKey = prefix + "accounts"

// TokensKey holds every token by the hex SHA-256 of the token (HASH hash ->
// token record, JSON). The token itself is never stored.
const TokensKey = prefix + "tokens"

// TokenIDsKey finds a token's hash from its public id (HASH id -> hash).
const TokenIDsKey = prefix + "token-ids"

// LastUsedKey holds when each token was last used (HASH id -> ms), apart
// from the records so recording a use rewrites one small field.
const LastUsedKey = prefix + "last-used"

// AccountTokensKey lists one account's tokens (HASH id -> hash), so
// removing the account removes them and listing them needs no scan.
func AccountTokensKey(account string) string { return prefix + "account-tokens:" + account }

// TokenNamesKey holds one account's token names (HASH name -> id): a name
// is unique per account, so "revoke laptop" means one token.
func TokenNamesKey(account string) string { return prefix + "token-names:" + account }

// SessionKey holds one web admin session, by the hex SHA-256 of its
// cookie (STRING: session record, JSON), expiring after the idle time;
// each use pushes the expiry back (GETEX).
func SessionKey(hash string) string { return prefix + "session:" + hash }
