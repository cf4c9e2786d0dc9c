"""A fake serial port with Feetech STS3215 servos behind it, for lerobot's real bus and robot classes.

Only the serial port is fake: lerobot's ``FeetechMotorsBus`` and the Feetech SDK encode and decode real
protocol-0 packets (PING, READ, WRITE, SYNC_READ, SYNC_WRITE) against these register tables. A servo
with torque enabled reaches its goal position at once (an ideal servo).
"""

from __future__ import annotations

PING, READ, WRITE, SYNC_READ, SYNC_WRITE = 0x01, 0x02, 0x03, 0x82, 0x83
BROADCAST = 0xFE
MODEL_STS3215 = 777
ADDR_TORQUE, ADDR_GOAL, ADDR_PRESENT = 40, 42, 56


def _checksum(body: bytes) -> int:
    return (~sum(body)) & 0xFF


def status_packet(motor_id: int, params: bytes = b"", error: int = 0) -> bytes:
    body = bytes([motor_id, len(params) + 2, error]) + params
    return b"\xff\xff" + body + bytes([_checksum(body)])


class FakeServos:
    """Register tables of servos 1..n (little-endian words, as the STS series uses)."""

    def __init__(self, ids: list[int]) -> None:
        self.mem: dict[int, bytearray] = {}
        for i in ids:
            m = bytearray(256)
            m[0], m[1] = 3, 10                                  # firmware 3.10
            m[3:5] = MODEL_STS3215.to_bytes(2, "little")
            m[5] = i
            m[9:11] = (0).to_bytes(2, "little")                 # Min_Position_Limit
            m[11:13] = (4095).to_bytes(2, "little")             # Max_Position_Limit
            m[ADDR_GOAL:ADDR_GOAL + 2] = (2048).to_bytes(2, "little")
            m[ADDR_PRESENT:ADDR_PRESENT + 2] = (2048).to_bytes(2, "little")
            self.mem[i] = m
        self.packets = 0

    def position(self, motor_id: int) -> int:
        return int.from_bytes(self.mem[motor_id][ADDR_PRESENT:ADDR_PRESENT + 2], "little")

    def _write(self, motor_id: int, addr: int, data: bytes) -> None:
        m = self.mem[motor_id]
        m[addr:addr + len(data)] = data
        if m[ADDR_TORQUE] and addr <= ADDR_GOAL + 1 and addr + len(data) > ADDR_GOAL:
            m[ADDR_PRESENT:ADDR_PRESENT + 2] = m[ADDR_GOAL:ADDR_GOAL + 2]

    def handle(self, packet: bytes) -> bytes:
        """One instruction packet in, the status packet(s) out."""
        assert packet[:2] == b"\xff\xff", packet
        motor_id, length, instr = packet[2], packet[3], packet[4]
        params = packet[5:5 + length - 2]
        assert packet[5 + length - 2] == _checksum(packet[2:5 + length - 2]), "bad checksum"
        self.packets += 1
        ids = sorted(self.mem) if motor_id == BROADCAST else [motor_id] if motor_id in self.mem else []
        if instr == PING:
            return b"".join(status_packet(i) for i in ids)
        if instr == READ:
            addr, n = params[0], params[1]
            return b"".join(status_packet(i, bytes(self.mem[i][addr:addr + n])) for i in ids)
        if instr == WRITE:
            for i in ids:
                self._write(i, params[0], bytes(params[1:]))
            return b"" if motor_id == BROADCAST else b"".join(status_packet(i) for i in ids)
        if instr == SYNC_READ:
            addr, n = params[0], params[1]
            return b"".join(status_packet(i, bytes(self.mem[i][addr:addr + n])) for i in params[2:] if i in self.mem)
        if instr == SYNC_WRITE:
            addr, n = params[0], params[1]
            rest = params[2:]
            for k in range(0, len(rest), n + 1):
                if rest[k] in self.mem:
                    self._write(rest[k], addr, bytes(rest[k + 1:k + 1 + n]))
            return b""
        raise NotImplementedError(f"instruction 0x{instr:02x}")


class FakeSerial:
    """Stands in for ``serial.Serial``: bytes written are instruction packets, answers can be read back.
    ``late_replies`` = n: the next n answers (a sync read's: every servo's packet) arrive late, once the next packet is
    written (after the driver's read of them timed out), as a loaded host or a slow USB adapter delivers them;
    ``lost_replies`` = n: the next n answers never arrive."""

    def __init__(self, servos: FakeServos, **_kwargs) -> None:
        self.servos = servos
        self.rx = bytearray()
        self.tx = bytearray()
        self.is_open = True
        self.late_replies = 0
        self.lost_replies = 0
        self._held = bytearray()

    @property
    def in_waiting(self) -> int:
        return len(self.rx)

    def write(self, data) -> int:
        self.rx += self._held
        self._held.clear()
        self.tx += bytes(data)
        while len(self.tx) >= 4 and len(self.tx) >= 4 + self.tx[3]:
            n = 4 + self.tx[3]
            packet, self.tx = bytes(self.tx[:n]), self.tx[n:]
            answer = self.servos.handle(packet)
            if answer and self.lost_replies > 0:
                self.lost_replies -= 1
            elif answer and self.late_replies > 0:
                self.late_replies -= 1
                self._held += answer
            else:
                self.rx += answer
        return len(data)

    def read(self, n: int) -> bytes:
        out, self.rx = bytes(self.rx[:n]), self.rx[n:]
        return out

    def reset_input_buffer(self) -> None:
        self.rx.clear()

    def flush(self) -> None:
        pass

    def close(self) -> None:
        self.is_open = False
