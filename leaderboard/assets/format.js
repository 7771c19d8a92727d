// hoard's number formats, shared by the project and downloader pages
// (no build step: each page loads this first).
window.hoardFormat = (function () {
  "use strict";
  const count = (n) => Number(n || 0).toLocaleString("en-US");
  function bytes(n) {
    n = Number(n || 0);
    const units = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
    let i = 0;
    while (n >= 1024 && i < units.length - 1) { n /= 1024; i++; }
    return (i ? n.toFixed(n < 10 ? 2 : 1) : Math.round(n)) + " " + units[i];
  }
  // perMinute writes a rate of items: "1,234/min", or "0.25/min" when slow.
  function perMinute(x) {
    x = Number(x || 0);
    if (x >= 100) return count(Math.round(x)) + "/min";
    return (x >= 10 ? x.toFixed(1) : x.toFixed(2)) + "/min";
  }
  const perSecond = (x) => bytes(x) + "/s";
  // duration writes seconds as the two largest units: "3 d 4 h", "7 min".
  function duration(s) {
    if (s === null || s === undefined || !isFinite(s)) return "–";
    s = Math.max(0, Math.round(s));
    if (s < 60) return s + " s";
    const d = Math.floor(s / 86400), h = Math.floor((s % 86400) / 3600), m = Math.floor((s % 3600) / 60);
    if (d >= 365) return count(Math.round(d / 365)) + " years";
    if (d) return d + " d" + (h ? " " + h + " h" : "");
    if (h) return h + " h" + (m ? " " + m + " min" : "");
    return m + " min";
  }
  return { count, bytes, perMinute, perSecond, duration };
})();
