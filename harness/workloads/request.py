"""The one request type every backend consumes (satisfies ``jenga.interface.RequestView``)."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from jenga.interface import ImageSpan


@dataclass
class Request:
    """One serving request.

    ``prompt_token_ids`` is an int32 numpy array (arXiv-QA prompts are ~90k tokens; tuples of Python
    ints would cost gigabytes). Requests that share a prefix share those exact token ids, so
    content hashing finds the shared blocks. ``images`` lists the request's images (see
    :class:`jenga.interface.ImageSpan`); ``prefix_group`` names the shared-prefix group (e.g. the
    arXiv article group) for analysis only. ``output_token_ids`` is filled by the backend as tokens
    are generated.
    """

    request_id: str
    arrival_time: float
    prompt_token_ids: np.ndarray
    output_len: int
    images: tuple[ImageSpan, ...] = ()
    prefix_group: str | None = None
    output_token_ids: list[int] = field(default_factory=list)

    @property
    def prompt_len(self) -> int:
        return len(self.prompt_token_ids)

    @property
    def num_image_tokens(self) -> int:
        return sum(im.num_tokens for im in self.images)

    @property
    def total_len(self) -> int:
        """Prompt plus full output: the most tokens this request will ever hold."""
        return self.prompt_len + self.output_len

    def fresh_copy(self) -> Request:
        """The same request with no generated tokens (each backend run starts from one)."""
        return Request(self.request_id, self.arrival_time, self.prompt_token_ids, self.output_len,
                       self.images, self.prefix_group)
