#!/usr/bin/python3
"""A warrior's tracker calls, made with Tornado's HTTP client as seesaw does.

seesaw-kit 0.10.3 needs Tornado 4 and Python < 3.10, which Debian no longer
ships, so this drives Debian's Tornado directly with what seesaw sends
(warrior-protocol.md section 1): POSTs with a JSON body, Content-Type
application/json, the warrior User-Agent, 20 s timeouts, redirects followed.
It applies seesaw's success rules and prints one JSON line per step.

usage: tornado_warrior.py <tracker_url> <multi_tracker_url> <downloader>
"""
import json
import sys

from tornado.httpclient import HTTPClient, HTTPRequest, HTTPClientError

tracker_url, multi_url, downloader = sys.argv[1], sys.argv[2], sys.argv[3]
client = HTTPClient()  # simple_httpclient, seesaw's default
user_agent = "ArchiveTeam Warrior/0.10.3 Standalone"


def post(url, body):
    request = HTTPRequest(
        url, method="POST", body=json.dumps(body),
        headers={"Content-Type": "application/json", "User-Agent": user_agent},
        connect_timeout=20, request_timeout=20, follow_redirects=True)
    try:
        response = client.fetch(request)
    except HTTPClientError as error:
        response = error.response
    return response


def report(step, response, **extra):
    line = {"step": step, "code": response.code,
            "effective_url": response.effective_url, "requested_url": response.request.url}
    line.update(extra)
    print(json.dumps(line), flush=True)


# GetItemFromTracker: success is 200 with a JSON object holding item_name;
# every key is copied onto the item.
version = "20240101.01"
response = post(tracker_url + "/request", {"downloader": downloader, "api_version": "2", "version": version})
item = json.loads(response.body)
report("request", response, item=item)

# SendDoneToTracker: success is 200 and a body that strips to "OK".
response = post(tracker_url + "/done", {
    "downloader": downloader, "version": version, "item": item["item_name"],
    "bytes": {"data": 1234}, "id": {"pipeline_hash": "abc", "python_version": sys.version}})
report("done", response, ok=response.body.decode().strip() == "OK")

# UploadWithTracker: 200 with upload_target ending in "/".
response = post(tracker_url + "/upload", {"downloader": downloader, "item_name": item["item_name"], "version": version})
report("upload", response, target=json.loads(response.body).get("upload_target"))

# The production multi-item form: tracker URL ".../multi=3/" + "/request".
response = post(multi_url + "/request", {"downloader": downloader, "api_version": "2", "version": version})
items = json.loads(response.body)["item_name"].split("\0")
report("multi_request", response, items=items)

# Done for the items that succeeded only, NUL-joined, to the plain done URL.
response = post(tracker_url + "/done", {
    "downloader": downloader, "version": version, "item": "\0".join(items[:2]), "bytes": {"data": 99}})
report("multi_done", response, ok=response.body.decode().strip() == "OK")

# A version below the minimum: seesaw's message for 455 is "code out of date".
response = post(tracker_url + "/request", {"downloader": downloader, "api_version": "2", "version": "20231231.99"})
report("old_version", response)
