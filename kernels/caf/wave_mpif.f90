! wave_mpif.f90 - the 2D acoustic wave of the coarray paper in Fortran 2008 + MPI (mpi_f08).
!
! Purpose: the MPI side of the paper's comparison (K1 = T_blocking / T_nonblocking),
! computing exactly mpilab.halo.serial_wave on a 2D process grid (MPI_Dims_create order
! (py, px), MPI_Cart_create without reordering, blocks split as mpilab.halo.split).
! Algorithm, one step: the E and S ghosts of px and py arrive, vx and vy are updated;
! the W ghost of vx and the N ghost of vy arrive, px and py are updated, and the Ricker
! source is added. Each of the two exchanges runs in the chosen mode:
!   blocking    - MPI_Send / MPI_Recv per field and side; along each axis processes with
!                 an even coordinate send first and odd ones receive first, so the chain
!                 cannot deadlock whatever the message size;
!   nonblocking - the paper's: MPI_Irecv + MPI_Isend for every transfer, update the points
!                 that need no ghost, MPI_Waitall, update the boundary line.
! Columns travel as an MPI vector datatype straight from and into the field.
!
! Parameters (key=value; see wave_common.f90): nx, ny, steps, mode, f0, courant, sx, sy,
! py, px, warmup, iters, reps, min_time, out, ftz, debug. Writes out.field (rank 0, the
! gathered pressure) and out.times (rank 0) when out is given.
module wave_mpif_run
  use mpi_f08
  use wave_common
  implicit none
  private
  public :: main

  integer, parameter :: W = 1, E = 2, N = 3, S = 4
  type(wave_args) :: a
  type(MPI_Comm) :: cart
  type(MPI_Datatype) :: col
  type(MPI_Request) :: req(8)
  integer :: nproc, me, coords(2), nbr(4), rows, cols, y0, x0, vxc, vyr, nreq
  integer :: lsx, lsy
  logical :: has_src
  integer(int64) :: nstep
  real(dp) :: dt
  real(dp), allocatable, target, asynchronous :: f(:, :, :)
  real(dp), allocatable :: times(:)
  real(dp) :: skew(SKEW_REPS)

contains

  subroutine main()
    character(len=:), allocatable :: msg
    integer :: k

    call MPI_Init()
    call MPI_Comm_size(MPI_COMM_WORLD, nproc)
    call MPI_Comm_rank(MPI_COMM_WORLD, me)
    call parse_args(a, msg)
    if (len(msg) == 0) call check_args(a, nproc, [character(len=16) :: 'blocking', &
                                                  'nonblocking'], msg)
    if (len(msg) > 0) then
      if (me == 0) write (error_unit, '(a)') 'wave_mpif: ' // msg
      call MPI_Finalize()
      error stop 2
    end if
    call set_ftz(a%ftz)

    call MPI_Cart_create(MPI_COMM_WORLD, 2, a%dims, [.false., .false.], .false., cart)
    call MPI_Cart_coords(cart, me, 2, coords)
    call MPI_Cart_shift(cart, 1, 1, nbr(W), nbr(E))
    call MPI_Cart_shift(cart, 0, 1, nbr(N), nbr(S))
    call split(a%ny, a%dims(1), coords(1), y0, rows)
    call split(a%nx, a%dims(2), coords(2), x0, cols)
    allocate (f(0:cols + 1, 0:rows + 1, 4))
    f = 0
    call MPI_Type_vector(rows, 1, cols + 2, MPI_DOUBLE_PRECISION, col)
    call MPI_Type_commit(col)
    dt = a%courant
    ! the walls: the last column of vx and the last row of vy of the grid never move
    vxc = cols
    if (x0 + cols == a%nx) vxc = cols - 1
    vyr = rows
    if (y0 + rows == a%ny) vyr = rows - 1
    lsx = a%sx - x0 + 1
    lsy = a%sy - y0 + 1
    has_src = lsx >= 1 .and. lsx <= cols .and. lsy >= 1 .and. lsy <= rows
    nstep = 0

    do k = 1, a%steps
      call step()
    end do
    if (len(a%out) > 0) call gather_and_write(a%out // '.field')
    if (a%reps > 0) then
      allocate (times(a%reps))
      call time_steps(step, barrier, maxall, a, times, skew)
      if (me == 0 .and. len(a%out) > 0) call write_times(a%out // '.times', a, nproc, times, &
                                                         skew, library())
    end if
    call MPI_Type_free(col)
    call MPI_Comm_free(cart)
    call MPI_Finalize()
  end subroutine main

  subroutine step()
    real(dp) :: src

    if (nstep == 0 .and. len_trim(a%debug) > 0 .and. me == nproc - 1) call misbehave()
    ! pressure ghosts (E and S of px and py), then the velocities
    call exchange([1, 2, 1, 2], [E, E, S, S], 1)
    ! velocity ghosts (W of vx, N of vy), then the pressures
    call exchange([3, 4], [W, N], 2)
    if (has_src) then
      src = (0.5_dp * dt) * ricker((real(nstep, dp) + 0.5_dp) * dt, a%f0)
      f(lsx, lsy, 1) = f(lsx, lsy, 1) + src
      f(lsx, lsy, 2) = f(lsx, lsy, 2) + src
    end if
    nstep = nstep + 1
  end subroutine step

  ! Fill ghost `sides(t)` of field `fields(t)` for every transfer t, and do the update of
  ! `round` (1: velocities, 2: pressures) that needs them.
  subroutine exchange(fields, sides, round)
    integer, intent(in) :: fields(:), sides(:), round
    integer :: t, axis_coord

    if (trim(a%mode) == 'blocking') then
      do t = 1, size(fields)
        axis_coord = coords(1)
        if (sides(t) == W .or. sides(t) == E) axis_coord = coords(2)
        if (mod(axis_coord, 2) == 0) then
          call send(fields(t), sides(t), t)
          call recv(fields(t), sides(t), t)
        else
          call recv(fields(t), sides(t), t)
          call send(fields(t), sides(t), t)
        end if
      end do
      call update(round, .true., .true.)
    else
      nreq = 0
      do t = 1, size(fields)
        call recv(fields(t), sides(t), t)
      end do
      do t = 1, size(fields)
        call send(fields(t), sides(t), t)
      end do
      call update(round, .true., .false.)
      call MPI_Waitall(nreq, req, MPI_STATUSES_IGNORE)
      if (MPI_ASYNC_PROTECTS_NONBLOCKING .eqv. .false.) call MPI_F_sync_reg(f)
      call update(round, .false., .true.)
    end if
  end subroutine exchange

  ! Receive ghost `side` of field k from the neighbour on that side (MPI_Irecv in the
  ! nonblocking mode).
  subroutine recv(k, side, tag)
    integer, intent(in) :: k, side, tag
    integer :: i, j, cnt
    type(MPI_Datatype) :: typ

    select case (side)
    case (W); i = 0; j = 1
    case (E); i = cols + 1; j = 1
    case (N); i = 1; j = 0
    case default; i = 1; j = rows + 1
    end select
    call line(side, cnt, typ)
    if (trim(a%mode) == 'blocking') then
      call MPI_Recv(f(i, j, k), cnt, typ, nbr(side), tag, cart, MPI_STATUS_IGNORE)
    else
      nreq = nreq + 1
      call MPI_Irecv(f(i, j, k), cnt, typ, nbr(side), tag, cart, req(nreq))
    end if
  end subroutine recv

  ! Send the edge opposite `side` of field k to the neighbour there (it fills that
  ! neighbour's ghost `side`).
  subroutine send(k, side, tag)
    integer, intent(in) :: k, side, tag
    integer :: i, j, cnt, dest
    type(MPI_Datatype) :: typ

    select case (side)
    case (W); i = cols; j = 1; dest = nbr(E)
    case (E); i = 1; j = 1; dest = nbr(W)
    case (N); i = 1; j = rows; dest = nbr(S)
    case default; i = 1; j = 1; dest = nbr(N)
    end select
    call line(side, cnt, typ)
    if (trim(a%mode) == 'blocking') then
      call MPI_Send(f(i, j, k), cnt, typ, dest, tag, cart)
    else
      nreq = nreq + 1
      call MPI_Isend(f(i, j, k), cnt, typ, dest, tag, cart, req(nreq))
    end if
  end subroutine send

  subroutine line(side, cnt, typ)
    integer, intent(in) :: side
    integer, intent(out) :: cnt
    type(MPI_Datatype), intent(out) :: typ

    if (side == W .or. side == E) then
      cnt = 1
      typ = col
    else
      cnt = cols
      typ = MPI_DOUBLE_PRECISION
    end if
  end subroutine line

  ! Round 1 updates vx and vy, round 2 px and py: the points that need no ghost
  ! (interior) and/or the line next to the ghosts just received (ring).
  subroutine update(round, interior, ring)
    integer, intent(in) :: round
    logical, intent(in) :: interior, ring

    if (round == 1) then
      if (interior .and. ring) then
        call vx_cols(f(:, :, 1), f(:, :, 2), f(:, :, 3), dt, 1, vxc, rows)
        call vy_rows(f(:, :, 1), f(:, :, 2), f(:, :, 4), dt, 1, vyr, cols)
      else if (interior) then
        call vx_cols(f(:, :, 1), f(:, :, 2), f(:, :, 3), dt, 1, min(vxc, cols - 1), rows)
        call vy_rows(f(:, :, 1), f(:, :, 2), f(:, :, 4), dt, 1, min(vyr, rows - 1), cols)
      else
        if (vxc == cols) call vx_cols(f(:, :, 1), f(:, :, 2), f(:, :, 3), dt, cols, cols, rows)
        if (vyr == rows) call vy_rows(f(:, :, 1), f(:, :, 2), f(:, :, 4), dt, rows, rows, cols)
      end if
    else
      if (interior .and. ring) then
        call px_cols(f(:, :, 3), f(:, :, 1), dt, 1, cols, rows)
        call py_rows(f(:, :, 4), f(:, :, 2), dt, 1, rows, cols)
      else if (interior) then
        call px_cols(f(:, :, 3), f(:, :, 1), dt, 2, cols, rows)
        call py_rows(f(:, :, 4), f(:, :, 2), dt, 2, rows, cols)
      else
        call px_cols(f(:, :, 3), f(:, :, 1), dt, 1, 1, rows)
        call py_rows(f(:, :, 4), f(:, :, 2), dt, 1, 1, cols)
      end if
    end if
  end subroutine update

  ! p = px + py of every block, assembled on rank 0 and written there.
  subroutine gather_and_write(path)
    character(len=*), intent(in) :: path
    real(dp), allocatable :: p(:, :), blk(:, :)
    integer :: r, c(2), by0, bx0, br, bc

    allocate (blk(cols, rows))
    blk = f(1:cols, 1:rows, 1) + f(1:cols, 1:rows, 2)
    if (me /= 0) then
      call MPI_Send(blk, cols * rows, MPI_DOUBLE_PRECISION, 0, 99, cart)
      return
    end if
    allocate (p(a%nx, a%ny))
    p(x0 + 1:x0 + cols, y0 + 1:y0 + rows) = blk
    do r = 1, nproc - 1
      call MPI_Cart_coords(cart, r, 2, c)
      call split(a%ny, a%dims(1), c(1), by0, br)
      call split(a%nx, a%dims(2), c(2), bx0, bc)
      deallocate (blk)
      allocate (blk(bc, br))
      call MPI_Recv(blk, bc * br, MPI_DOUBLE_PRECISION, r, 99, cart, MPI_STATUS_IGNORE)
      p(bx0 + 1:bx0 + bc, by0 + 1:by0 + br) = blk
    end do
    call write_field(path, p)
  end subroutine gather_and_write

  ! First line of MPI_Get_library_version ("Open MPI v4.1.4, package: ...").
  function library() result(first)
    character(len=:), allocatable :: first
    character(len=MPI_MAX_LIBRARY_VERSION_STRING) :: text
    integer :: n, eol

    call MPI_Get_library_version(text, n)
    eol = index(text(:n), new_line('a'))
    if (eol == 0) eol = n + 1
    first = trim(text(:eol - 1))
  end function library

  subroutine barrier()
    call MPI_Barrier(cart)
  end subroutine barrier

  subroutine maxall(t)
    real(dp), intent(inout) :: t
    call MPI_Allreduce(MPI_IN_PLACE, t, 1, MPI_DOUBLE_PRECISION, MPI_MAX, cart)
  end subroutine maxall

  subroutine misbehave()
    if (trim(a%debug) == 'crash') then
      write (error_unit, '(a)') 'wave_mpif: crashing on purpose (debug=crash)'
      call MPI_Abort(MPI_COMM_WORLD, 3)
    else if (trim(a%debug) == 'hang') then
      do
        call sleep(1)
      end do
    end if
  end subroutine misbehave

end module wave_mpif_run

program wave_mpif
  use wave_mpif_run, only: main
  call main()
end program wave_mpif
