package http1

// SampleHeads are requests as clients send them, and near misses: seeds
// for the fuzz tests of the parser and of the listeners that use it.
var SampleHeads = []string{
	"GET /announce?info_hash=%aa%00%26%25%ff%01%02%03%04%05%06%07%08%09%0a%0b%0c%0d%0e%0f&peer_id=-qB4520-abcdefghijkl&port=6881&left=100&compact=1 HTTP/1.1\r\nHost: t:6969\r\nUser-Agent: qBittorrent/4.5.2\r\nAccept-Encoding: gzip\r\nConnection: close\r\n\r\n",
	"GET /pk/announce?info_hash=x HTTP/1.0\r\n\r\n",
	"GET /announce HTTP/1.0\r\nConnection: keep-alive\r\n\r\n",
	"HEAD /scrape HTTP/1.1\r\nhost: a\r\nX-Forwarded-For: 192.0.2.1, 198.51.100.2\r\nx-forwarded-for: 203.0.113.9\r\n\r\n",
	"GET http://t:6969/announce?x=1 HTTP/1.1\r\nHost: t\r\n\r\n",
	"GET /a%20b/announce HTTP/1.1\r\nHost: t\r\n\r\n",
	"GET /announce%zz HTTP/1.1\r\nHost: t\r\n\r\n",
	"GET / HTTP/1.1\nHost: t\n\n",
	"POST /announce HTTP/1.1\r\nHost: t\r\nContent-Length: 0\r\nContent-Length: 0\r\n\r\n",
	"GET / HTTP/1.1\r\nHost: t\r\nContent-Length: 3\r\n\r\nabc",
	"GET / HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
	"GET / HTTP/1.1\r\nHost: t\r\n folded\r\n\r\n",
	"GET * HTTP/1.1\r\nHost: t\r\n\r\n",
	"OPTIONS * HTTP/1.1\r\nHost: t\r\n\r\n",
	"GET / HTTP/2.0\r\n\r\n",
	"GET / HTTP/1.1\r\nHost: [::1]:6969\r\nConnection: upgrade, Keep-Alive\r\n\r\n",
	"\r\n\r\nGET / HTTP/1.1\r\nHost: t\r\n\r\nGET /scrape HTTP/1.1\r\nHost: t\r\n\r\n",
}
