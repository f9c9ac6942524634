-- wrk script for bench/api_ingest.py: replay pre-signed WAHA deliveries.
-- The requests file holds one delivery per line: "<hex HMAC-SHA512>\t<JSON body>".
-- Each wrk thread takes every Nth line (N = thread count), so threads never send the
-- same message; when a thread runs out it starts over (those repeats are duplicates).
-- Usage: wrk -s bench/ingest.lua URL -- <requests file> <threads>

local next_tid = 0

function setup(thread)
  thread:set("tid", next_tid)
  next_tid = next_tid + 1
end

function init(args)
  local path, nthreads = args[1], tonumber(args[2])
  prepared = {}
  local line_no = 0
  for line in io.lines(path) do
    if line_no % nthreads == tid then
      local signature, body = line:match("^(%x+)\t(.*)$")
      prepared[#prepared + 1] = wrk.format("POST", wrk.path, {
        ["Content-Type"] = "application/json",
        ["X-Webhook-Hmac"] = signature,
        ["X-Webhook-Hmac-Algorithm"] = "sha512",
      }, body)
    end
    line_no = line_no + 1
  end
  cursor = 0
end

function request()
  cursor = cursor % #prepared + 1
  return prepared[cursor]
end
