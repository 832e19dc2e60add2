"""The card's register map as the gateware tests use it: csr.json read as it is, with names.

The Python side of gateware/tools/gen_regs.py's outputs (the Rust crate tlpx-regs and the
firmware's tlpx_regs.h): register offsets, fields, field values by name and constants all come
from a card's csr.json, so a test encodes a register value with the card's own fields, never
with hand-written shifts and codes:

    m = CsrMap.load(path)
    m.encode("generator.config", operation="write", address_pattern="random", check_data=1)
    m.get("generator.status.ended_by", status) == m.value("generator.status.ended_by", "count")
"""

import json
from pathlib import Path


class CsrMap:
    def __init__(self, regmap):
        self.regmap = regmap
        self.registers = {}
        for region in regmap["regions"]:
            for reg in region["registers"]:
                self.registers[f"{region['name']}.{reg['name']}"] = reg

    @classmethod
    def load(cls, path):
        return cls(json.loads(Path(path).read_text()))

    def reg(self, name):
        """BAR0 offset of register `region.register`."""
        return self._register(name)["offset"]

    def _register(self, name):
        try:
            return self.registers[name]
        except KeyError:
            raise KeyError(f"no register {name} in the map") from None

    def field(self, name):
        """Field `region.register.field` as csr.json has it (offset, size, values, ...)."""
        register, _, field = name.rpartition(".")
        for f in self._register(register)["fields"]:
            if f["name"] == field:
                return f
        raise KeyError(f"register {register} has no field {field}")

    def values(self, name):
        """The values of field `region.register.field`: {value name: value}."""
        return {v[1]: int(v[0], 0) for v in self.field(name)["values"]}

    def value(self, name, value_name):
        """The value of field `name` that the map calls `value_name`."""
        values = self.values(name)
        if value_name not in values:
            raise KeyError(f"field {name} has no value {value_name!r} (values: {', '.join(values)})")
        return values[value_name]

    def get(self, name, register_value):
        """Field `region.register.field` of a register value."""
        f = self.field(name)
        return (register_value >> f["offset"]) & ((1 << f["size"]) - 1)

    def bit(self, name):
        """The mask of a field in its register (a one-bit field: its bit)."""
        f = self.field(name)
        return ((1 << f["size"]) - 1) << f["offset"]

    def encode(self, register, **fields):
        """A value of `region.register` from its fields; a field's value is a number or the
        name of one of its values. Fields not given are 0; an unknown field or a value that
        does not fit is an error."""
        out = 0
        for name, value in fields.items():
            f = self.field(f"{register}.{name}")
            if isinstance(value, str):
                value = self.value(f"{register}.{name}", value)
            value = int(value)
            if not 0 <= value < (1 << f["size"]):
                raise ValueError(f"{register}.{name} is {f['size']} bits wide: {value} does not fit")
            out |= value << f["offset"]
        return out

    def dut(self):
        """Who is in the card's accelerator slot, as the build recorded it: name, version,
        map_hash (slot.dut_map_hash, e.g. tlpx-regs' RULE30_DUT_MAP_HASH for rule 30),
        placement, window_bytes; None for a card without a slot."""
        return self.regmap.get("dut")

    def owner(self, region):
        """``card`` or ``dut``: who owns region `region` (the map hash covers the card's)."""
        for r in self.regmap["regions"]:
            if r["name"] == region:
                return r.get("owner", "card")
        raise KeyError(f"no region {region} in the map")

    def constant(self, name):
        """A constant the gateware exported with the map."""
        return self.regmap["constants"][name]
