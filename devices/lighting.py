"""Lighting environments for the simulated camera: illuminance, colour and mains flicker.

Illuminances are typical values (lux on the scene): moonless lit street ~10, living room ~50-150,
office ~500 (EN 12464-1), overcast day ~2,000-5,000, open shade / daylight ~20,000, direct sun
~100,000. Two sets: ``LIGHTINGS`` ("wide-range", 9 environments from a lit street at night to
direct sun) and ``DARK_ROOM_LIGHTINGS`` ("es-diverse", 6 indoor lamp environments of a dark room
lit by two ceiling lamps, as ImageNet-ES Diverse was captured: one or both lamps, warm or cool,
one dimmed; 10 to 250 lux on the print, typical of residential ceiling lighting). Colours are
blackbody colour temperatures turned into linear-RGB channel gains relative
to D65 (``sensor.illuminant_rgb``); discharge lamps whose spectra are far from a blackbody (sodium)
give their gains directly. Flicker: light output modulation depth at twice the mains frequency.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from edgekit.errors import InputError


@dataclass(frozen=True)
class Lighting:
    """One environment. ``rgb``: explicit linear-RGB gains (luminance 1) overriding ``cct_k``."""

    name: str
    lux: float
    cct_k: float = 6504.0
    rgb: tuple[float, float, float] | None = None
    flicker_depth: float = 0.0  # 0 = steady light; 0.3 = output swings +-30 %
    flicker_hz: float = 100.0  # 2 x 50 Hz mains
    description: str = ""

    def gains(self) -> tuple[float, float, float]:
        """Linear-RGB channel gains of this light (Rec. 709 luminance 1)."""
        if self.rgb is not None:
            return self.rgb
        return _cct_gains(round(self.cct_k))

    def to_json(self) -> dict[str, object]:
        return {
            "name": self.name,
            "lux": self.lux,
            "cct_k": self.cct_k,
            "rgb": list(self.gains()),
            "flicker_depth": self.flicker_depth,
            "flicker_hz": self.flicker_hz,
        }


@lru_cache(maxsize=64)
def _cct_gains(cct_k: int) -> tuple[float, float, float]:
    from edgekit.devices.sensor import illuminant_rgb

    return illuminant_rgb(float(cct_k))


# High-pressure sodium: a narrow orange band around 589 nm, almost no blue (luminance ~1).
_SODIUM_RGB = (2.2, 0.72, 0.05)

LIGHTINGS: dict[str, Lighting] = {
    lit.name: lit
    for lit in (
        Lighting(
            "night-street",
            10.0,
            2100.0,
            rgb=_SODIUM_RGB,
            flicker_depth=0.4,
            description="street at night under sodium lamps",
        ),
        Lighting(
            "sodium-lamp",
            40.0,
            2100.0,
            rgb=_SODIUM_RGB,
            flicker_depth=0.4,
            description="close to a high-pressure sodium lamp (strongly orange)",
        ),
        Lighting(
            "dim-room",
            50.0,
            2700.0,
            flicker_depth=0.05,
            description="living room lit by a warm incandescent bulb",
        ),
        Lighting(
            "warm-led",
            150.0,
            3000.0,
            flicker_depth=0.15,
            description="kitchen under warm LED downlights",
        ),
        Lighting(
            "office",
            500.0,
            4000.0,
            flicker_depth=0.3,
            description="office under fluorescent tubes (EN 12464-1 desk level)",
        ),
        Lighting("overcast", 3000.0, 7000.0, description="outdoors under an overcast sky"),
        Lighting("shade", 10000.0, 8000.0, description="open shade on a sunny day (bluish)"),
        Lighting("daylight", 20000.0, 5500.0, description="bright daylight"),
        Lighting("direct-sun", 100000.0, 5800.0, description="midday direct sunlight"),
    )
}


# A dark room (no daylight) lit by two ceiling lamps, lux on the print below them; the lamps are
# a warm (2700 K) and a cool (5000 K) LED lamp, LED drivers flicker a little, a dimmed one more.
DARK_ROOM_LIGHTINGS: dict[str, Lighting] = {
    lit.name: lit
    for lit in (
        Lighting(
            "lamp-dimmed",
            10.0,
            2700.0,
            flicker_depth=0.3,
            description="dark room, the warm lamp dimmed low (PWM dimming flickers)",
        ),
        Lighting(
            "lamp-warm",
            35.0,
            2700.0,
            flicker_depth=0.1,
            description="dark room, the warm ceiling lamp alone",
        ),
        Lighting(
            "lamp-cool",
            60.0,
            5000.0,
            flicker_depth=0.1,
            description="dark room, the cool ceiling lamp alone",
        ),
        Lighting(
            "lamps-mixed",
            95.0,
            3600.0,
            flicker_depth=0.1,
            description="dark room, both lamps (warm + cool mix)",
        ),
        Lighting(
            "lamps-cool-near",
            150.0,
            5000.0,
            flicker_depth=0.1,
            description="dark room, both lamps, the cool one moved above the print",
        ),
        Lighting(
            "lamps-bright",
            250.0,
            4000.0,
            flicker_depth=0.1,
            description="dark room, both lamps at full power close to the print",
        ),
    )
}

LIGHTING_SETS: dict[str, tuple[str, ...]] = {
    "es-diverse": tuple(DARK_ROOM_LIGHTINGS),
    "wide-range": tuple(LIGHTINGS),
}


def get_lighting(lighting: str | Lighting) -> Lighting:
    """The environment named ``lighting`` (either set, or ``lighting`` itself); unknown names are
    InputError."""
    if isinstance(lighting, Lighting):
        return lighting
    found = LIGHTINGS.get(lighting) or DARK_ROOM_LIGHTINGS.get(lighting)
    if found is None:
        known = ", ".join([*LIGHTINGS, *DARK_ROOM_LIGHTINGS])
        raise InputError(f"unknown lighting '{lighting}'; expected one of {known}")
    return found


def lighting_set(name: str) -> tuple[str, ...]:
    """Environment names of the lighting set ``name`` ("es-diverse" | "wide-range")."""
    if name not in LIGHTING_SETS:
        raise InputError(
            f"unknown lighting set '{name}'; expected one of {', '.join(LIGHTING_SETS)}"
        )
    return LIGHTING_SETS[name]
