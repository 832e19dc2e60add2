-- tlpx.lua: Wireshark / tshark dissector for tlpx spy captures exported as pcapng
-- (`tlpx spy convert cap.tlpx --pcapng cap.pcapng`, `tlpx spy capture --pcapng`).
--
--   tshark -X lua_script:wireshark/tlpx.lua -r cap.pcapng
--   tshark -X lua_script:wireshark/tlpx.lua -2 -r cap.pcapng -Y 'tlpx.type == "MRd"' \
--          -T fields -e tlpx.seq -e tlpx.addr -e tlpx.response_in
--
-- Or copy it into Wireshark's personal Lua plugins folder (docs/wireshark.md).
--
-- Packet layout (traces/FORMAT.md, "pcapng export"; link type LINKTYPE_USER15 = 162):
--   pseudo-header (its length in byte 1, little-endian fields), then for a TLP its header as on
--   the wire (3 or 4 big-endian DWs, PCIe Base spec 2.2) and the captured payload; for an MSI
--   the MSI body; for a completion timeout nothing; for an orphan payload record its bytes.
--
-- Requests and completions are paired as Wireshark's request/response trackers do: a
-- non-posted request opens (requester ID, tag, direction); a completion travelling the other
-- way with that requester ID and tag answers it (tlpx.request_in), and the request points to
-- its first completion (tlpx.response_in, which needs two passes: tshark -2). The spy's own
-- matching gives tlpx.latency (card cycles, first beat to first beat); tlpx.response_time is
-- the same from the packets' timestamps (ns of card time).

local tlpx = Proto("tlpx", "tlpx PCIe spy")

local PSEUDO_HEADER_VERSION = 1

-- Pseudo-header kinds (tlpx_trace::pcapng::kind).
local KIND = { [0] = "request", [1] = "completion", [2] = "completion timeout", [3] = "MSI", [4] = "orphan payload" }
-- Completion status (PCIe Base spec 2.2.9).
local STATUS = { [0] = "SC", [1] = "UR", [2] = "CRS", [4] = "CA" }

local f = tlpx.fields
-- Pseudo-header.
f.version = ProtoField.uint8("tlpx.version", "Pseudo-header version")
f.hdr_len = ProtoField.uint8("tlpx.hdr_len", "Pseudo-header length")
f.dir = ProtoField.string("tlpx.dir", "Direction")
f.kind = ProtoField.uint8("tlpx.kind", "Record kind", base.DEC, KIND)
f.flags = ProtoField.uint32("tlpx.flags", "Flags", base.HEX)
f.matched = ProtoField.bool("tlpx.matched", "Matched to a read the spy saw", 32, nil, 0x01)
f.last = ProtoField.bool("tlpx.last", "Last completion of its read", 32, nil, 0x02)
f.own = ProtoField.bool("tlpx.own", "The spy's own traffic", 32, nil, 0x04)
f.payload_complete = ProtoField.bool("tlpx.payload_complete", "Every payload record arrived", 32, nil, 0x08)
f.trigger = ProtoField.bool("tlpx.trigger", "Matched the trigger", 32, nil, 0x10)
f.poisoned = ProtoField.bool("tlpx.poisoned", "Poisoned (EP)", 32, nil, 0x20)
f.seq = ProtoField.uint32("tlpx.seq", "Sequence")
f.lost = ProtoField.uint32("tlpx.lost", "Records lost before this one")
f.ts_cycles = ProtoField.uint64("tlpx.ts_cycles", "Timestamp (card cycles)")
f.latency = ProtoField.uint32("tlpx.latency", "Latency (cycles)")
f.duration = ProtoField.uint16("tlpx.duration", "Duration (cycles)")
f.wait = ProtoField.uint8("tlpx.wait", "Wait cycles (back-pressure)")
f.gap = ProtoField.uint8("tlpx.gap", "Gap cycles (sender paused)")
f.ph_requester = ProtoField.uint16("tlpx.ph.requester", "Requester ID (pseudo-header)", base.HEX)
f.ph_completer = ProtoField.uint16("tlpx.ph.completer", "Completer ID (pseudo-header)", base.HEX)
f.split = ProtoField.uint8("tlpx.split", "Split index")
f.captured = ProtoField.uint16("tlpx.payload_captured", "Payload captured (bytes)")
f.tlp_payload = ProtoField.uint32("tlpx.tlp_payload_len", "TLP payload length (bytes)")
f.payload_records = ProtoField.uint8("tlpx.payload_records", "Payload records")
-- Derived.
f.type = ProtoField.string("tlpx.type", "Type")
f.kind_name = ProtoField.string("tlpx.kind_name", "Kind")
f.request_in = ProtoField.framenum("tlpx.request_in", "Request in", base.NONE, frametype.REQUEST)
f.response_in = ProtoField.framenum("tlpx.response_in", "Response in", base.NONE, frametype.RESPONSE)
f.response_time = ProtoField.relative_time("tlpx.response_time", "Response time")
-- TLP header.
f.fmt = ProtoField.uint8("tlpx.fmt", "Fmt")
f.tlp_type = ProtoField.uint8("tlpx.tlp_type", "Type field")
f.tc = ProtoField.uint8("tlpx.tc", "Traffic class")
f.attr = ProtoField.uint8("tlpx.attr", "Attr (bit 0 No Snoop, bit 1 Relaxed Ordering)")
f.ep = ProtoField.bool("tlpx.ep", "Poisoned (EP)")
f.length = ProtoField.uint16("tlpx.length", "Length (DWs)")
f.rid = ProtoField.uint16("tlpx.rid", "Requester ID", base.HEX)
f.tag = ProtoField.uint8("tlpx.tag", "Tag", base.HEX)
f.first_be = ProtoField.uint8("tlpx.first_be", "First DW byte enables", base.HEX)
f.last_be = ProtoField.uint8("tlpx.last_be", "Last DW byte enables", base.HEX)
f.msg_code = ProtoField.uint8("tlpx.msg_code", "Message code", base.HEX)
f.addr = ProtoField.uint64("tlpx.addr", "Address", base.HEX)
f.cid = ProtoField.uint16("tlpx.cid", "Completer ID", base.HEX)
f.status = ProtoField.string("tlpx.status", "Completion status")
f.bcm = ProtoField.bool("tlpx.bcm", "Byte Count Modified")
f.byte_count = ProtoField.uint16("tlpx.byte_count", "Byte count")
f.lower_addr = ProtoField.uint8("tlpx.lower_addr", "Lower address", base.HEX)
f.payload = ProtoField.bytes("tlpx.payload", "Payload")
-- MSI.
f.msi_vector = ProtoField.uint8("tlpx.msi.vector", "MSI vector")
f.msi_sources = ProtoField.uint32("tlpx.msi.sources", "MSI sources pending (bit per source)", base.HEX)
f.msi_wait = ProtoField.uint32("tlpx.msi.wait", "MSI wait cycles (hard IP held it off)")

local e_short = ProtoExpert.new("tlpx.short", "Packet shorter than its pseudo-header says", expert.group.MALFORMED, expert.severity.ERROR)
local e_version = ProtoExpert.new("tlpx.version.unknown", "Unknown pseudo-header version", expert.group.UNDECODED, expert.severity.WARN)
local e_lost = ProtoExpert.new("tlpx.lost.expert", "Records lost before this one (spy ring full)", expert.group.SEQUENCE, expert.severity.WARN)
local e_orphan = ProtoExpert.new("tlpx.orphan", "Payload whose TLP record was lost", expert.group.SEQUENCE, expert.severity.WARN)
local e_timeout = ProtoExpert.new("tlpx.timeout", "Completion timeout: the read got no (last) completion", expert.group.RESPONSE_CODE, expert.severity.WARN)
local e_status = ProtoExpert.new("tlpx.status.error", "Completion status is not SC", expert.group.RESPONSE_CODE, expert.severity.NOTE)
tlpx.experts = { e_short, e_version, e_lost, e_orphan, e_timeout, e_status }

-- Integer helpers (Lua 5.2 numbers hold 32-bit values exactly).
local function bits(v, shift, width)
    return math.floor(v / 2 ^ shift) % 2 ^ width
end

-- The transaction type without the address width (filters: tlpx.type == "MRd"), and the
-- record kind as the CSV names it (MRd32, CplD, ...).
local function tlp_names(fmt, ty)
    local t5 = ty
    if t5 == 0x0A or t5 == 0x0B then
        local data = bits(fmt, 1, 1) == 1
        local name = (data and "CplD" or "Cpl") .. (t5 == 0x0B and "Lk" or "")
        if name == "CplDLk" or name == "CplLk" then
            name = data and "CplDLk" or "CplLk"
        end
        return name, name
    end
    local w = bits(fmt, 0, 1) == 1 and "64" or "32"
    if t5 == 0 and (fmt == 0 or fmt == 1) then return "MRd", "MRd" .. w end
    if t5 == 0 and (fmt == 2 or fmt == 3) then return "MWr", "MWr" .. w end
    if t5 == 1 and (fmt == 0 or fmt == 1) then return "MRdLk", "MRdLk" end
    if t5 == 2 and fmt == 0 then return "IORd", "IORd" end
    if t5 == 2 and fmt == 2 then return "IOWr", "IOWr" end
    if t5 == 4 and fmt == 0 then return "CfgRd0", "CfgRd0" end
    if t5 == 4 and fmt == 2 then return "CfgWr0", "CfgWr0" end
    if t5 == 5 and fmt == 0 then return "CfgRd1", "CfgRd1" end
    if t5 == 5 and fmt == 2 then return "CfgWr1", "CfgWr1" end
    if bits(t5, 3, 2) == 2 and fmt == 1 then return "Msg", "Msg" end
    if bits(t5, 3, 2) == 2 and fmt == 3 then return "MsgD", "MsgD" end
    if t5 == 0x0C and (fmt == 2 or fmt == 3) then return "FetchAdd", "FetchAdd" end
    if t5 == 0x0D and (fmt == 2 or fmt == 3) then return "Swap", "Swap" end
    if t5 == 0x0E and (fmt == 2 or fmt == 3) then return "CAS", "CAS" end
    return "Other", "Other"
end

local NON_POSTED = { MRd = true, MRdLk = true, IORd = true, IOWr = true, CfgRd0 = true, CfgWr0 = true,
                     CfgRd1 = true, CfgWr1 = true, FetchAdd = true, Swap = true, CAS = true }

-- Pairing state, filled on the first pass (pinfo.visited false) and read on later ones.
local open_requests, request_of, response_of, request_time = {}, {}, {}, {}

function tlpx.init()
    open_requests, request_of, response_of, request_time = {}, {}, {}, {}
end

local function pair_key(rid, tag, dir)
    return rid .. ":" .. tag .. ":" .. dir
end

function tlpx.dissector(tvb, pinfo, root)
    local len = tvb:len()
    if len < 4 then
        return 0
    end
    pinfo.cols.protocol = "tlpx"
    local tree = root:add(tlpx, tvb())
    local version = tvb(0, 1):uint()
    local hlen = tvb(1, 1):uint()
    tree:add(f.version, tvb(0, 1))
    tree:add(f.hdr_len, tvb(1, 1))
    if version ~= PSEUDO_HEADER_VERSION then
        tree:add_proto_expert_info(e_version, "pseudo-header version " .. version .. ", this dissector knows " .. PSEUDO_HEADER_VERSION)
    end
    if hlen < 48 or len < hlen then
        tree:add_proto_expert_info(e_short)
        return len
    end
    local ph = tree:add(tvb(0, hlen), "Pseudo-header")
    local dir = tvb(2, 1):uint() == 1 and "up" or "down"
    local kind = tvb(3, 1):uint()
    local flags = tvb(4, 4):le_uint()
    local seq = tvb(8, 4):le_uint()
    local lost = tvb(12, 4):le_uint()
    ph:add(f.dir, tvb(2, 1), dir)
    ph:add(f.kind, tvb(3, 1))
    local ft = ph:add_le(f.flags, tvb(4, 4))
    ft:add_le(f.matched, tvb(4, 4))
    ft:add_le(f.last, tvb(4, 4))
    ft:add_le(f.own, tvb(4, 4))
    ft:add_le(f.payload_complete, tvb(4, 4))
    ft:add_le(f.trigger, tvb(4, 4))
    ft:add_le(f.poisoned, tvb(4, 4))
    ph:add_le(f.seq, tvb(8, 4))
    local lost_item = ph:add_le(f.lost, tvb(12, 4))
    if lost > 0 then
        lost_item:add_proto_expert_info(e_lost, lost .. " records lost (sequence gap) before seq " .. seq)
    end
    ph:add_le(f.ts_cycles, tvb(16, 8))
    local latency = tvb(24, 4):le_uint()
    ph:add_le(f.latency, tvb(24, 4))
    ph:add_le(f.duration, tvb(28, 2))
    ph:add(f.wait, tvb(30, 1))
    ph:add(f.gap, tvb(31, 1))
    ph:add_le(f.ph_requester, tvb(32, 2))
    ph:add_le(f.ph_completer, tvb(34, 2))
    ph:add(f.split, tvb(37, 1))
    ph:add_le(f.captured, tvb(38, 2))
    ph:add_le(f.tlp_payload, tvb(40, 4))
    ph:add(f.payload_records, tvb(44, 1))

    local info
    local body = hlen
    if kind == 2 then
        -- Completion timeout: the read's requester ID and tag are in the pseudo-header.
        tree:add(f.type, tvb(3, 1), "Timeout")
        tree:add(f.kind_name, tvb(3, 1), "Timeout")
        local rid = tvb(32, 2):le_uint()
        local tag = tvb(36, 1):uint()
        tree:add_le(f.rid, tvb(32, 2))
        tree:add(f.tag, tvb(36, 1))
        tree:add_proto_expert_info(e_timeout, "read rid " .. string.format("0x%04x", rid) .. " tag " .. string.format("0x%02x", tag) .. " waited " .. latency .. " cycles")
        local key = pair_key(rid, tag, dir)
        if not pinfo.visited and open_requests[key] then
            request_of[pinfo.number] = open_requests[key]
            open_requests[key] = nil
        end
        if request_of[pinfo.number] then
            tree:add(f.request_in, request_of[pinfo.number])
        end
        info = string.format("%-4s Timeout rid 0x%04x tag 0x%02x waited %d cycles", dir, rid, tag, latency)
    elseif kind > 4 then
        -- A kind this dissector does not know (a newer pseudo-header): say so, decode nothing.
        tree:add_proto_expert_info(e_version, "record kind " .. kind .. " is not one this dissector knows (0..4)")
        info = string.format("%-4s unknown record kind %d", dir, kind)
    elseif kind == 3 and len < body + 12 then
        tree:add_proto_expert_info(e_short)
        return len
    elseif kind == 3 then
        tree:add(f.type, tvb(3, 1), "MSI")
        tree:add(f.kind_name, tvb(3, 1), "MSI")
        local m = tree:add(tvb(body, len - body), "MSI")
        m:add(f.msi_vector, tvb(body, 1))
        m:add_le(f.msi_sources, tvb(body + 4, 4))
        m:add_le(f.msi_wait, tvb(body + 8, 4))
        info = string.format("up   MSI vector %d sources 0x%x", tvb(body, 1):uint(), tvb(body + 4, 4):le_uint())
    elseif kind == 4 then
        tree:add(f.type, tvb(3, 1), "Payload")
        tree:add(f.kind_name, tvb(3, 1), "Payload")
        tree:add_proto_expert_info(e_orphan)
        if len > body then
            tree:add(f.payload, tvb(body, len - body))
        end
        info = string.format("%-4s payload of a lost TLP record (%d bytes)", dir, len - body)
    else
        -- A TLP: its header as on the wire.
        if len < body + 4 then
            tree:add_proto_expert_info(e_short)
            return len
        end
        local dw0 = tvb(body, 4):uint()
        local fmt = bits(dw0, 29, 3)
        local ty = bits(dw0, 24, 5)
        local four_dw = bits(fmt, 0, 1) == 1
        local hdr_bytes = four_dw and 16 or 12
        if len < body + hdr_bytes then
            tree:add_proto_expert_info(e_short)
            return len
        end
        local type_name, kind_name = tlp_names(fmt, ty)
        local th = tree:add(tvb(body, hdr_bytes), "TLP header: " .. kind_name)
        th:add(f.type, tvb(body, 1), type_name)
        th:add(f.kind_name, tvb(body, 1), kind_name)
        th:add(f.fmt, tvb(body, 1), fmt)
        th:add(f.tlp_type, tvb(body, 1), ty)
        th:add(f.tc, tvb(body + 1, 1), bits(dw0, 20, 3))
        th:add(f.attr, tvb(body + 2, 1), bits(dw0, 12, 2))
        th:add(f.ep, tvb(body + 2, 1), bits(dw0, 14, 1) == 1)
        local length = bits(dw0, 0, 10)
        local is_cpl = (ty == 0x0A or ty == 0x0B)
        local with_data = bits(fmt, 1, 1) == 1
        -- Length 0 means 1024 DWs, except in a completion without data, which has no Length
        -- (the field is reserved): shown as 0, as tlpx's CSV and log do.
        if length == 0 and not (is_cpl and not with_data) then length = 1024 end
        th:add(f.length, tvb(body + 2, 2), length)
        local dw1 = tvb(body + 4, 4):uint()
        local rid, tag
        if is_cpl then
            local dw2 = tvb(body + 8, 4):uint()
            local cid = bits(dw1, 16, 16)
            local status = bits(dw1, 13, 3)
            local bc = bits(dw1, 0, 12)
            if bc == 0 then bc = 4096 end
            rid = bits(dw2, 16, 16)
            tag = bits(dw2, 8, 8)
            th:add(f.cid, tvb(body + 4, 2), cid)
            local st = th:add(f.status, tvb(body + 6, 1), STATUS[status] or ("rsv" .. status))
            if status ~= 0 then
                st:add_proto_expert_info(e_status, "completion status " .. (STATUS[status] or ("reserved " .. status)))
            end
            th:add(f.bcm, tvb(body + 6, 1), bits(dw1, 12, 1) == 1)
            th:add(f.byte_count, tvb(body + 6, 2), bc)
            th:add(f.rid, tvb(body + 8, 2), rid)
            th:add(f.tag, tvb(body + 10, 1), tag)
            th:add(f.lower_addr, tvb(body + 11, 1), bits(dw2, 0, 7))
            info = string.format("%-4s %-6s %-3s bc %d len %d rid 0x%04x tag 0x%02x", dir, kind_name, STATUS[status] or "rsv", bc, length, rid, tag)
            -- Pairing: a completion going the other way answers (rid, tag).
            local key = pair_key(rid, tag, dir == "up" and "down" or "up")
            if not pinfo.visited then
                local req = open_requests[key]
                if req then
                    request_of[pinfo.number] = req
                    if not response_of[req] then
                        response_of[req] = pinfo.number
                    end
                    -- The spy says which completion is the last; without its match, the byte
                    -- count that this completion's data covers says it.
                    local carried = length * 4 - bits(dw2, 0, 2)
                    local is_last = bits(flags, 1, 1) == 1 or (bits(flags, 0, 1) == 0 and (bc <= carried or bits(fmt, 1, 1) == 0))
                    if is_last then
                        open_requests[key] = nil
                    end
                end
            end
            local req = request_of[pinfo.number]
            if req then
                th:add(f.request_in, req)
                if request_time[req] then
                    -- Seconds as a double: exact to the ns for card times under about 100 days.
                    local d = pinfo.abs_ts - request_time[req]
                    local s = math.floor(d)
                    th:add(f.response_time, NSTime.new(s, math.floor((d - s) * 1e9 + 0.5)))
                end
            end
        else
            rid = bits(dw1, 16, 16)
            tag = bits(dw1, 8, 8)
            th:add(f.rid, tvb(body + 4, 2), rid)
            th:add(f.tag, tvb(body + 6, 1), tag)
            if type_name == "Msg" or type_name == "MsgD" then
                th:add(f.msg_code, tvb(body + 7, 1))
            else
                th:add(f.last_be, tvb(body + 7, 1), bits(dw1, 4, 4))
                th:add(f.first_be, tvb(body + 7, 1), bits(dw1, 0, 4))
            end
            local addr
            if four_dw then
                addr = UInt64.new(tvb(body + 12, 4):uint() - bits(tvb(body + 12, 4):uint(), 0, 2), tvb(body + 8, 4):uint())
                th:add(f.addr, tvb(body + 8, 8), addr)
            else
                local lo = tvb(body + 8, 4):uint()
                addr = UInt64.new(lo - bits(lo, 0, 2), 0)
                th:add(f.addr, tvb(body + 8, 4), addr)
            end
            info = string.format("%-4s %-6s 0x%s len %d rid 0x%04x tag 0x%02x", dir, kind_name, addr:tohex():gsub("^0+(.)", "%1"), length, rid, tag)
            if NON_POSTED[type_name] then
                if not pinfo.visited then
                    open_requests[pair_key(rid, tag, dir)] = pinfo.number
                    request_time[pinfo.number] = pinfo.abs_ts
                end
                if response_of[pinfo.number] then
                    th:add(f.response_in, response_of[pinfo.number])
                end
            end
        end
        body = body + hdr_bytes
        if len > body then
            tree:add(f.payload, tvb(body, len - body))
            info = info .. string.format(" data %d bytes", len - body)
        end
    end
    if lost > 0 then
        info = string.format("[%d lost] ", lost) .. info
    end
    if bits(flags, 4, 1) == 1 then
        info = "[trigger] " .. info
    end
    if bits(flags, 5, 1) == 1 then
        info = info .. " EP (poisoned)"
    end
    pinfo.cols.info = string.format("seq %d ", seq) .. info
    return len
end

DissectorTable.get("wtap_encap"):add(wtap_encaps.USER15, tlpx)
