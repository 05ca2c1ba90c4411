"""Send exactly N POST /v1/completions to URL over C keep-alive connections; check 200s."""

import asyncio
import sys

BODY = b'{"model":"m","prompt":"hi","max_tokens":1}'


async def conn(host: str, port: int, n: int) -> int:
    reader, writer = await asyncio.open_connection(host, port)
    req = (
        b"POST /v1/completions HTTP/1.1\r\nHost: r\r\nContent-Type: application/json\r\n"
        b"Content-Length: %d\r\n\r\n" % len(BODY)
    ) + BODY
    ok = 0
    for _ in range(n):
        writer.write(req)
        head = await reader.readuntil(b"\r\n\r\n")
        length = 0
        for line in head.split(b"\r\n"):
            if line.lower().startswith(b"content-length:"):
                length = int(line.split(b":")[1])
        await reader.readexactly(length)
        ok += head.startswith(b"HTTP/1.1 200")
    writer.close()
    return ok


async def main() -> None:
    url, n, c = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    host, port = url.split("://")[1].split(":")
    oks = await asyncio.gather(*(conn(host, int(port), n // c) for _ in range(c)))
    assert sum(oks) == n // c * c, oks
    print(f"{sum(oks)} x 200")


asyncio.run(main())
