-- wrk script for bench/account.ts: each request carries the next unused DPoP proof of a file
-- written before the run (one per line), since the service accepts each proof once (RFC 9449 §11.1).
-- Arguments: <threads> <file>. Thread n takes lines n, n + threads, n + 2 × threads, …
local next_id = 0
function setup(thread)
  thread:set("id", next_id)
  next_id = next_id + 1
end

function init(args)
  local threads = tonumber(args[1])
  proofs = {}
  local line_number = 0
  for line in io.lines(args[2]) do
    if line_number % threads == id then proofs[#proofs + 1] = line end
    line_number = line_number + 1
  end
  position = 0
end

function request()
  position = position + 1
  -- Past the last proof the request goes without one and is refused: wrk counts it as an error.
  wrk.headers["DPoP"] = proofs[position] or "exhausted"
  return wrk.format()
end
