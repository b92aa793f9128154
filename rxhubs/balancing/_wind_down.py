"""How the balancing loop stops: renew what still drains, then hand or release every partition it owns, at once.

**The consumers that stay get the partitions straight away** (:mod:`~rxhubs.balancing._dealing`). A stop first
writes a leaving record beside its presence record (others stopping at the same time then hand nothing to it); once
its partitions drained, it lists the presence records and names the consumers that stay as the partitions'
recipients, each its share, in the very writes that released them before. The recipients start them when their next
listing shows them (their presence watch runs their round once this consumer's presence record is released), with no
claim, and with the blob store no read of the checkpoint. What nobody stays to take, or a failed listing, is released
to no one, as before; both records are released with the last call.

A release of more records than one call carries (:data:`~rxhubs.balancing._store_calls.CLAIM_CHUNK`) sends all its
calls at once, not three at a time, and the presence record once they are answered. At a stop of four of eight
consumers of 1,024 partitions on a busy Azurite, a leaver's fourth call of 32 waited 6.6 s for a turn, and its
presence record, alone in the fifth, was answered before it: the others' presence watch saw the leaver gone while
32 of its records still named it, planned with it, and claimed those only at a later round. Now the others see it
gone only once everything it owned is released.

Every record naming this consumer is released before the loop reports it stopped (``on_stopped``), whatever
state its partition was in: claimed, checkpoint being read, link opening, draining (a session each, released
once ready), and also handed to it by another consumer without its having started it yet (no session: the
record names it all the same). Without that, a stop right after a handover left the handed partitions owned by
a consumer that was gone, and the others waited out their expiry. Those handed and not started are dealt to the
consumers that stay like the rest (from the listing that found them), not released to whoever claims them next.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import replace

from rxhubs._models import Ownership
from rxhubs._retry import Backoff
from rxhubs._rx import sleep
from rxhubs._rx._driver import current_stepper
from rxhubs.balancing._dealing import LEAVING_SUFFIX, gone_or_leaving, leaving_record, stop_recipients
from rxhubs.balancing._gains import Gains
from rxhubs.balancing._listener import RevokeReason
from rxhubs.balancing._planner import partition_sort_key
from rxhubs.balancing._records import presence_etag, releases_of, split_won
from rxhubs.balancing._store_calls import CLAIM_CHUNK

__all__ = ["WindDown"]

log = logging.getLogger("rxhubs.balancing")

#: Attempts at the final release before the records are left to expire.
_FINAL_ATTEMPTS = 4


class WindDown(Gains):
    """The stop of :class:`~rxhubs.balancing._loop.BalancingLoop`: its last renewals and its final release."""

    retry: Backoff
    fatal: Exception | None
    _stopped_at: float
    _stopping: RevokeReason | None
    #: The leaving record's write, sent by ``stop()`` itself under asyncio (ahead of the drains' final writes)
    _announced: asyncio.Future[list[Ownership]] | None
    _stop_presence: list[Ownership] | None
    partition_ids: tuple[str, ...] | None

    async def _wind_down(self) -> None:
        """Keep renewing what is still draining; then hand or release everything, and the presence record, at once."""
        announced, self._announced = self._announced, None  # (sent by stop() under asyncio: _loop)
        leaving = await (announced if announced is not None else self._announce_leaving())
        next_renewal = self._stopped_at + self.settings.load_balancing_interval
        while any(not s.ready for s in self.sessions.values()):
            remaining = next_renewal - self._now()
            if remaining <= 0:
                renewed = await self._renew_draining()
                wait = self.settings.load_balancing_interval if renewed else self.retry.delay(1)
                next_renewal = self._now() + min(wait, self.settings.load_balancing_interval)
                continue
            self._wake.clear()
            await self._wake.wait(remaining)
        await self._deal_on_stop()
        # the listing for the records held without a session is answered while the sessions' releases go out (under
        # asyncio, when they take several calls): at a stop of four consumers of 1,024 partitions, a second each
        listing = asyncio.ensure_future(self._unheld_releases()) if current_stepper() is None else None
        unheld = None if listing is not None else await self._unheld_releases()
        won: list[Ownership] = []
        for attempt in range(1, _FINAL_ATTEMPTS + 1):
            try:
                releases = releases_of(self.sessions.values(), self.store)
                if listing is not None and unheld is None and len(releases) >= CLAIM_CHUNK:  # beside the listing
                    won = await self.calls.claim(releases, at_once=True)
                    unheld = await listing
                    won += await self.calls.claim(unheld, at_once=True)
                    await self._release_lost([*releases, *unheld], won)
                    await self.calls.claim([await self._final_presence_record(), *leaving])
                    break
                if listing is not None and unheld is None:
                    unheld = await listing
                records = [*releases, *(unheld or [])]
                if len(records) >= CLAIM_CHUNK:  # several calls: at once, then the presence record
                    won = await self.calls.claim(records, at_once=True)
                    await self._release_lost(records, won)
                    await self.calls.claim([await self._final_presence_record(), *leaving])
                else:
                    won = await self.calls.claim([*records, await self._final_presence_record(), *leaving])
                    await self._release_lost(records, won)
            except Exception as exc:
                self.listener.on_error("release", exc)
                if attempt < _FINAL_ATTEMPTS:
                    log.warning("balancing: releasing on stop failed (%s); retrying", exc)
                    await sleep(self.retry.delay(attempt))
                    continue
                log.warning("balancing: releasing on stop failed (%s); the records will expire instead", exc)
                releases, won = [], []
            break
        await self._take_back_hands(won)
        self._finish(releases)

    async def _take_back_hands(self, won: list[Ownership]) -> None:
        """Release again the partitions this stop handed to a consumer that began to stop meanwhile.

        A recipient whose leaving record this consumer's listing did not show yet (both stopped at once) may have
        listed the records naming it, to release them, before these hands landed: they would name a consumer that
        is gone until they expired. One listing of the presence records after the hands were written, only when
        some were: a recipient leaving or gone by then gets its hands taken back (a compare-and-swap on the etag
        this stop wrote: if the recipient released the record first, that write loses, and nothing changes). A
        recipient that writes its leaving record after this listing lists the records naming it after that write,
        and so sees these hands.
        """
        group = self.group[2]
        hands = [o for o in won if o.consumer_group == group and o.owner_id not in ("", self.owner_id)]
        if not hands:
            return
        try:
            presence = await self.calls.presence()
            gone = gone_or_leaving(presence, self._now(), self._expiry)
            back = [replace(o, owner_id="") for o in hands if o.owner_id in gone]
            if back:
                taken = await self.calls.claim(back, at_once=True)
                log.info("balancing: %d partitions handed to consumers stopping too were released (%d taken back)",
                         len(back), len(taken))
        except Exception as exc:
            log.debug("balancing: checking the recipients of the stop's hands failed (%s)", exc)

    async def _announce_leaving(self) -> list[Ownership]:
        """Write this consumer's leaving record (:mod:`~rxhubs.balancing._dealing`); its release, if it was written.

        Others stopping meanwhile hand nothing to this consumer. A failed write changes nothing but that.
        """
        if self._stopping == "dispose":
            return []
        ns, hub, _ = self.group
        try:
            won = await self.calls.claim([leaving_record(ns, hub, self.presence_group, self.owner_id)])
        except Exception as exc:
            log.debug("balancing: writing the leaving record failed (%s)", exc)
            return []
        return [replace(o, owner_id="") for o in won if o.partition_id == self.owner_id + LEAVING_SUFFIX]

    async def _deal_on_stop(self) -> None:
        """Name the consumers that stay as the recipients of this one's partitions (:func:`stop_recipients`).

        From the presence records listed now (who stays) and the records the last round listed (what each holds).
        Those it does not deal, or all when the listing fails, are released to no one, as before.
        """
        if self._stopping == "dispose" or not self.sessions:
            return
        presence = await self._stayers()
        if presence is None:
            return
        ready = sorted((pid for pid, s in self.sessions.items() if s.ready and not s.release_to),
                       key=partition_sort_key)
        dealt = stop_recipients(ready, self.owner_id, self._records_listed, presence,
                                len(self.partition_ids or ()), self._now(), self._expiry)
        for pid, recipient in dealt.items():
            self.sessions[pid].release_to = recipient
        if dealt:
            log.info("balancing: stopping: %d partitions handed to %d consumers that stay, %d released",
                     len(dealt), len(set(dealt.values())), len(self.sessions) - len(dealt))

    async def _stayers(self) -> list[Ownership] | None:
        """The presence records this stop deals from, listed once (again after a failure); None if the listing fails."""
        if self._stop_presence is None:
            try:
                self._stop_presence = await self.calls.presence()
            except Exception as exc:
                log.debug("balancing: listing the presence records to hand over on stop failed (%s)", exc)
        return self._stop_presence

    async def _deal_unheld(self, unheld: list[Ownership], records: list[Ownership]) -> list[Ownership]:
        """Hand on, like the rest, the records handed to this consumer that it had not started when it stopped.

        A hand lands; the recipient starts it at its next look or round. A stop in between held no session for it,
        and released it to no one: the consumers that stay claimed it a round later (the presence watch's test under
        load: ``tests/balancing/test_presence_watch.py``). They are dealt from ``records`` (the listing that found
        them, with this stop's own hands in it) and the presence records the stop listed, or lists now.
        """
        if self._stopping == "dispose" or not unheld:
            return [replace(record, owner_id="") for record in unheld]
        presence = await self._stayers() or []
        to = {pid: s.release_to for pid, s in self.sessions.items() if s.release_to}
        held = [replace(r, owner_id=to[r.partition_id]) if r.partition_id in to else r for r in records]
        pids = sorted((r.partition_id for r in unheld), key=partition_sort_key)
        dealt = stop_recipients(pids, self.owner_id, held, presence, len(self.partition_ids or ()), self._now(),
                                self._expiry)
        if dealt:
            log.info("balancing: stopping: %d partitions handed to this consumer and not started yet handed on to %d"
                     " consumers that stay", len(dealt), len(set(dealt.values())))
        return [replace(record, owner_id=dealt.get(record.partition_id, "")) for record in unheld]

    async def _release_lost(self, releases: list[Ownership], won: list[Ownership]) -> None:
        """Release again, from a listing, the records among ``releases`` that lost and still name this consumer.

        A renewal of theirs landed without its answer (a store time-out), so their etag moved on. Without this they
        stayed with this consumer's name until they expired. A record another consumer took meanwhile is left to it.
        One listing, only when something was lost; if it fails, those records expire.
        """
        group = self.group[2]
        lost = {r.partition_id for r in releases} - {o.partition_id for o in won if o.consumer_group == group}
        if not lost:
            return
        try:
            again = [replace(record, owner_id="") for record in await self.calls.owners()
                     if record.partition_id in lost and record.owner_id == self.owner_id]
            if again:
                log.warning("balancing: %d releases on stop found their records written since (a renewal answered"
                            " too late); releasing them again", len(again))
                await self.calls.claim(again, at_once=True)
        except Exception as exc:
            log.warning("balancing: releasing again on stop failed (%s); those records will expire instead", exc)

    async def _unheld_releases(self) -> list[Ownership]:
        """Releases of the records that name this consumer but that it holds no session for.

        A partition handed over to this consumer while it was stopping, before a round started it, is one (its
        former owner wrote this consumer's name into the record): it is handed on to the consumers that stay
        (:meth:`_deal_unheld`). A claim that won in the store but whose answer never arrived is another. Partitions
        avoided because another reader cut this one off keep their record: whoever took them over claims it. One
        listing per stop; if it fails, those records expire as before.
        """
        try:
            records = await self.calls.owners()
        except Exception as exc:
            log.warning("balancing: listing the records to release on stop failed (%s)", exc)
            return []
        now = self._now()
        unheld = [
            record
            for record in records
            if record.owner_id == self.owner_id
            and record.partition_id not in self.sessions
            and self.avoid.get(record.partition_id, now) <= now
        ]
        return await self._deal_unheld(unheld, records)

    async def _renew_draining(self) -> bool:
        """While stopping: keep the records held from expiring. True if renewed.

        Those of the partitions still draining, and those drained already: they wait for the rest, to be dealt out
        with them (a stop whose slowest partition drained past the expiration lost the others to their expiry).
        """
        renew = [s.record for s in self.sessions.values()]
        started = self._now()
        try:
            won = await self.calls.claim(renew)
        except Exception:
            self._expire()
            return False
        records, _ = split_won(won, self.presence_group, self.owner_id)
        for pid, record in records.items():
            session = self.sessions.get(pid)
            if session is not None:
                session.record, session.renewed_at = record, started
        self._arm_watchdog()
        return True

    async def _final_presence_record(self) -> Ownership:
        if self._presence_etag is None:  # the last presence claim failed: read the record's etag first
            return self._presence_record(await self.calls.presence(), "")
        return self._presence_record(None, "")

    def _presence_record(self, presence: list[Ownership] | None, owner_id: str) -> Ownership:
        ns, hub, _ = self.group
        etag = self._presence_etag if presence is None else presence_etag(presence, self.owner_id)
        return Ownership(ns, hub, self.presence_group, self.owner_id, owner_id, None, etag)

    def _finish(self, releases: list[Ownership]) -> None:
        self._forget_released(releases)
        for pid in list(self.sessions):
            self._lose(pid, "stopped")
        self._finished = True
        if self._watchdog is not None:
            self._watchdog.dispose()
            self._watchdog = None
        self.listener.on_stopped(self.fatal)
