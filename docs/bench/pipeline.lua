init = function(args)
  local r = {}
  for i = 1, tonumber(args[1]) or 16 do r[i] = wrk.format("GET", "/") end
  req = table.concat(r)
end
request = function() return req end
